package expiry_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/seatflow/orderexpiry/expiry"
)

type kinds []expiry.Kind

func (k *kinds) Observe(_ context.Context, e expiry.Event) { *k = append(*k, e.Kind) }

func TestMultiObserver(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		build func(a, b *kinds) expiry.Observer
		wantA []expiry.Kind
		wantB []expiry.Kind
	}{
		{"both get every event, in order", func(a, b *kinds) expiry.Observer { return expiry.MultiObserver(a, b) },
			[]expiry.Kind{expiry.KindPaid, expiry.KindCancelled}, []expiry.Kind{expiry.KindPaid, expiry.KindCancelled}},
		{"nil observers are skipped", func(a, b *kinds) expiry.Observer { return expiry.MultiObserver(nil, a, nil) },
			[]expiry.Kind{expiry.KindPaid, expiry.KindCancelled}, nil},
		{"none left is the no-op", func(a, b *kinds) expiry.Observer { return expiry.MultiObserver(nil) },
			nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var a, b kinds
			o := tc.build(&a, &b)
			o.Observe(ctx, expiry.Event{Kind: expiry.KindPaid})
			o.Observe(ctx, expiry.Event{Kind: expiry.KindCancelled})
			assert.Equal(t, kinds(tc.wantA), a)
			assert.Equal(t, kinds(tc.wantB), b)
		})
	}
	assert.Equal(t, expiry.NopObserver, expiry.MultiObserver(), "no observers at all")
	var only kinds
	assert.Same(t, &only, expiry.MultiObserver(nil, &only).(*kinds), "a single observer is returned as is")
}

func TestKindNames(t *testing.T) {
	for k, want := range map[expiry.Kind]string{expiry.KindSkipped: "skipped", expiry.KindReinstated: "reinstated",
		expiry.KindWarned: "warned", expiry.KindDeadlineChanged: "deadline_changed", expiry.KindRefunded: "refunded", expiry.KindDiverged: "diverged",
		expiry.KindProviderAnswered: "provider_answered", expiry.KindProviderAnswered + 1: "unknown", 0: "unknown"} {
		assert.Equal(t, want, k.String())
	}
}

func TestLateness(t *testing.T) {
	deadline := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	late, ok := expiry.Event{Kind: expiry.KindCancelled, Deadline: deadline, At: deadline.Add(1500 * time.Millisecond)}.Lateness()
	assert.True(t, ok)
	assert.Equal(t, 1500*time.Millisecond, late)
	_, ok = expiry.Event{Kind: expiry.KindCancelled, Deadline: deadline}.Lateness()
	assert.False(t, ok, "a store that did not report its clock says nothing")
	early, ok := expiry.Event{Kind: expiry.KindCancelled, Deadline: deadline, At: deadline.Add(-time.Minute)}.Lateness()
	assert.True(t, ok)
	assert.Negative(t, early, "a user's cancel before the deadline")
}
