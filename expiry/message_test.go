package expiry_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/expiry"
)

func TestMessageRoundTrip(t *testing.T) {
	m := expiry.Message{OrderNo: "ORD-2026.11_30", Hop: 12}
	body, err := expiry.EncodeMessage(m)
	require.NoError(t, err)
	assert.Equal(t, "oe1 ORD-2026.11_30 12", string(body))
	got, err := expiry.DecodeMessage(body)
	require.NoError(t, err)
	assert.Equal(t, m, got)
}

func TestDecodeMessageRejects(t *testing.T) {
	for name, body := range map[string][]byte{
		"empty":          nil,
		"huge":           bytes.Repeat([]byte("a"), 1<<20),
		"other version":  []byte("oe2 o1 1"),
		"json":           []byte(`{"order":"o1"}`),
		"no hop":         []byte("oe1 o1"),
		"empty order":    []byte("oe1  1"),
		"hash tag":       []byte("oe1 a{b}c 1"),
		"sql quote":      []byte("oe1 o'1 1"),
		"NUL":            []byte("oe1 o\x001 1"),
		"invalid utf-8":  []byte("oe1 o\xff 1"),
		"zero hop":       []byte("oe1 o1 0"),
		"negative hop":   []byte("oe1 o1 -3"),
		"overflow hop":   []byte("oe1 o1 99999999999999999999"),
		"trailing":       []byte("oe1 o1 1 x"),
		"leading zero":   []byte("oe1 o1 01"),
		"plus sign":      []byte("oe1 o1 +1"),
		"too long order": []byte("oe1 " + strings.Repeat("x", 65) + " 1"),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := expiry.DecodeMessage(body)
			assert.ErrorIs(t, err, expiry.ErrBadMessage)
		})
	}
}

func TestEncodeMessageRejects(t *testing.T) {
	for _, m := range []expiry.Message{{OrderNo: "", Hop: 1}, {OrderNo: "a b", Hop: 1}, {OrderNo: "o", Hop: 0}, {OrderNo: "o", Hop: expiry.MaxHop + 1}} {
		_, err := expiry.EncodeMessage(m)
		assert.Error(t, err, "%+v", m)
	}
}

func TestValidateID(t *testing.T) {
	for id, ok := range map[string]bool{
		"A-z_0.9":                   true,
		"ann.buyer+tix@example.com": true,
		strings.Repeat("x", 64):     true,
		strings.Repeat("x", 65):     false,
		"":                          false,
		"{show}":                    false,
		"a|b":                       false,
		"a b":                       false,
		"a'b":                       false,
		"a\x00":                     false,
		"é":                         false,
		"a;DROP TABLE oe_order;":    false,
	} {
		err := expiry.ValidateID("order number", id)
		assert.Equal(t, ok, err == nil, "%q: %v", id, err)
		if err != nil {
			assert.ErrorIs(t, err, expiry.ErrInvalidID)
		}
	}
}

func FuzzDecodeMessage(f *testing.F) {
	for _, s := range []string{"oe1 o1 1", "oe1 ORD-1 999", "oew1 o1 1 120000", "oew1 o1 1 0", "", "oe1 {x} 1", "oe1 o1 -1", "oe1 o1 1 1"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		m, err := expiry.DecodeMessage(body)
		if err != nil {
			if !errors.Is(err, expiry.ErrBadMessage) {
				t.Fatalf("error %v does not wrap ErrBadMessage", err)
			}
			return
		}
		if expiry.ValidateID("order number", m.OrderNo) != nil || m.Hop < 1 {
			t.Fatalf("accepted invalid message %+v from %q", m, body)
		}
		again, err := expiry.EncodeMessage(m)
		if err != nil || !bytes.Equal(again, body) {
			t.Fatalf("%q decodes to %+v which encodes to %q (%v)", body, m, again, err)
		}
	})
}

func FuzzValidateID(f *testing.F) {
	for _, s := range []string{"o1", "{a}", "a|b", "x\x00", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		if expiry.ValidateID("id", id) != nil {
			return
		}
		if strings.ContainsAny(id, "{}| '\"\\\x00") || len(id) == 0 || len(id) > expiry.MaxIDLen {
			t.Fatalf("accepted %q", id)
		}
	})
}

// The warning message has its own prefix: a consumer that does not know it
// (an older version) counts and drops it as a bad message instead of taking
// it for an expiry message.
func TestWarningMessageRoundTrip(t *testing.T) {
	m := expiry.Message{OrderNo: "ORD-1", Hop: 2, Warning: true, Lead: 2 * time.Minute}
	body, err := expiry.EncodeMessage(m)
	require.NoError(t, err)
	assert.Equal(t, "oew1 ORD-1 2 120000", string(body))
	got, err := expiry.DecodeMessage(body)
	require.NoError(t, err)
	assert.Equal(t, m, got)
	for name, body := range map[string]string{
		"no lead":       "oew1 ORD-1 2",
		"zero lead":     "oew1 ORD-1 2 0",
		"negative lead": "oew1 ORD-1 2 -5",
		"leading zero":  "oew1 ORD-1 2 0120000",
		"huge lead":     "oew1 ORD-1 2 999999999999",
		"trailing":      "oew1 ORD-1 2 100 1",
		"no hop":        "oew1 ORD-1 100",
		"lead on v1":    "oe1 ORD-1 2 100",
		"bad order":     "oew1 O{1} 2 100",
	} {
		_, err := expiry.DecodeMessage([]byte(body))
		assert.ErrorIs(t, err, expiry.ErrBadMessage, name)
	}
	for _, bad := range []expiry.Message{
		{OrderNo: "o", Hop: 1, Warning: true},
		{OrderNo: "o", Hop: 1, Warning: true, Lead: time.Microsecond},
		{OrderNo: "o", Hop: 1, Warning: true, Lead: expiry.MaxWarnLead + time.Millisecond},
		{OrderNo: "o", Hop: 1, Lead: time.Second},
	} {
		_, err := expiry.EncodeMessage(bad)
		assert.ErrorIs(t, err, expiry.ErrBadMessage, "%+v", bad)
	}
}
