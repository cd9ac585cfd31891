package reconcile_test

// Review of 5b820b7 (MariaDB's batch sheds the orders that changed between
// its pick and its lock and tries again, with no bound). Judged by
// outcomes against expiry/doc.go: I1, I2, liveness (a batch ends), and
// the reconciler's process surviving a round.

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/internal/testenv"
	"github.com/seatflow/orderexpiry/reconcile"
)

// TestReview16ExpireDueLoneOrderPaidInTheWindow (I1, liveness): the
// reconciler's page holds one due order, and its buyer's payment commits
// in the instant between the batch's pick and its lock (the payment at the
// deadline, the case the shedding was written for). The batch sheds it and
// has nothing left: ExpireDue must answer no results and no error, and the
// order stays paid.
func TestReview16ExpireDueLoneOrderPaidInTheWindow(t *testing.T) {
	ctx := context.Background()
	e, sc := newStepEnv(t)
	show := "ev" + testenv.Unique()
	p := e.place(t, "lone"+testenv.Unique(), "u1", show, e.now.Add(-2*time.Minute), "s1")
	var payErr error
	sc.arm(isBatchLock, func() {
		_, payErr = e.svc.Pay(ctx, cancel.Payment{OrderNo: p.OrderNo, UserID: p.UserID, PaymentID: "pay-" + testenv.Unique()})
	})
	var res []cancel.Result
	var err error
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Errorf("ExpireDue panicked: %v", r)
			}
		}()
		res, err = e.svc.ExpireDue(ctx, []string{p.OrderNo}, cancel.ReasonReconcile)
	}()
	require.NoError(t, payErr)
	assert.NoError(t, err)
	assert.Empty(t, res)
	assert.Equal(t, expiry.StatusPaid, e.status(t, p.OrderNo), "I1")
}

// TestReview16ReconcilerRoundSurvivesAPaymentAtTheDeadline (liveness,
// I3): a Reconciler's Round over a table whose only due order is paid
// between the batch's pick and its lock. The Round runs its batches in
// goroutines; it must end (and the process with it must not), reporting
// nothing expired. Run in a child process, as a crash would end this one.
func TestReview16ReconcilerRoundSurvivesAPaymentAtTheDeadline(t *testing.T) {
	if os.Getenv("R16_CHILD") == "1" {
		ctx := context.Background()
		e, sc := newStepEnv(t)
		show := "ev" + testenv.Unique()
		p := e.place(t, "lone"+testenv.Unique(), "u1", show, e.now.Add(-2*time.Minute), "s1")
		sc.arm(isBatchLock, func() {
			_, _ = e.svc.Pay(ctx, cancel.Payment{OrderNo: p.OrderNo, UserID: p.UserID, PaymentID: "pay-" + testenv.Unique()})
		})
		r, err := reconcile.New(reconcile.Config{Orders: e.store, Seats: e.seats, Service: e.svc, Settle: time.Nanosecond, Grace: time.Minute})
		require.NoError(t, err)
		rep, err := r.Round(ctx)
		t.Logf("round: %+v, %v", rep, err)
		assert.Equal(t, expiry.StatusPaid, e.status(t, p.OrderNo), "I1")
		assert.Zero(t, rep.Expired)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestReview16ReconcilerRoundSurvivesAPaymentAtTheDeadline$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "R16_CHILD=1")
	out, err := cmd.CombinedOutput()
	text := string(out)
	if len(text) > 3000 {
		text = text[:3000]
	}
	t.Logf("child:\n%s", text)
	assert.NoError(t, err, "the reconciler's process ended in its Round")
}
