package explore

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
)

// step is one choice of the explorer: run catalog entry kind (start it, or
// resume it where it stopped) until it finishes, or until it reaches its
// stop-th gated call of this step (counting from 0; a resumed operation is
// at its call 0), which it does not make yet. fail, when >= 0, makes that
// gated call fail instead (a seat store that did not answer) while the
// operation goes on.
type step struct {
	kind, stop, fail int
}

func complete(k int) step { return step{kind: k, stop: -1, fail: -1} }

// stepLog is what one step did.
type stepLog struct {
	calls      []call
	touched    []string // calls the gate let through untraced (op.touched)
	gates      []string // the gated calls met, in order
	stopped    string   // the gated call it stopped before ("": it finished)
	result     string   // what the operation returned, when it finished
	readsFirst bool     // a fresh operation read before its first gated call
}

// run makes one step in w.
func (w *world) run(kinds []kind, s step) stepLog {
	w.step++
	k := kinds[s.kind]
	if k.hookDown != nil {
		w.mu.Lock()
		w.hookDown = *k.hookDown
		w.mu.Unlock()
		return stepLog{result: "ok"}
	}
	if k.clock != nil {
		d := k.clock(w.observeOrders())
		w.advance(d)
		return stepLog{result: "+" + d.String()}
	}
	if k.back > 0 {
		w.stepBack(k.back)
		return stepLog{result: "-" + k.back.String()}
	}
	if k.host != nil {
		return stepLog{result: k.host(w)}
	}
	var o *op
	for _, p := range w.parked {
		if p.kind == s.kind {
			o = p
		}
	}
	var log stepLog
	gate := 0
	before, touchedBefore := 0, 0
	// In a replay (w.fast), an operation the step runs to completion does
	// not stop at its gates: nothing is decided there.
	free := w.fast && s.stop < 0 && s.fail < 0
	if o == nil {
		o = w.startOp(k, s.kind, false, free)
	} else {
		o.free = free
		w.running = o
		delete(w.parked, o.id)
		before, touchedBefore = len(o.trace), len(o.touched)
		log.gates = append(log.gates, o.at)
		w.send(o, s, 0)
		gate = 1
	}
	for {
		ev := <-w.events
		if ev.op != o {
			panic(fmt.Sprintf("explore: operation %d ran while %d was driven", ev.op.id, o.id))
		}
		if ev.done {
			log.result = ev.at
			break
		}
		if gate == 0 {
			log.readsFirst = len(o.trace) > before
		}
		log.gates = append(log.gates, ev.at)
		if gate == s.stop {
			o.at = ev.at
			w.parked[o.id] = o
			log.stopped = ev.at
			break
		}
		w.send(o, s, gate)
		gate++
	}
	w.running = nil
	log.calls = slices.Clone(o.trace[before:])
	log.touched = slices.Clone(o.touched[touchedBefore:])
	return log
}

// startOp starts an operation of kind k in its own goroutine; free, it
// does not stop at its gates (op.free).
func (w *world) startOp(k kind, idx int, auto, free bool) *op {
	o := &op{id: len(w.ops), kind: idx, name: k.name, tenant: k.tenant, started: w.clk.Now(), step: w.step, round: k.round != "", resume: make(chan command), auto: auto, free: free}
	w.ops = append(w.ops, o)
	w.running = o
	ctx := context.WithValue(context.Background(), opKey{}, o)
	w.pool.run(func() {
		res := k.run(ctx, w)
		w.events <- event{op: o, done: true, at: res}
	})
	return o
}

// pool runs operations on goroutines it keeps between worlds: a replay
// starts a few operations, and starting (and growing the stacks of) fresh
// goroutines for each was a fifth of the exploration's time. The zero
// value is not usable; close ends every goroutine.
type pool struct {
	work chan func()
	wg   sync.WaitGroup
}

func newPool() *pool { return &pool{work: make(chan func())} }

// run runs f on an idle goroutine of the pool, or on a new one.
func (p *pool) run(f func()) {
	select {
	case p.work <- f:
	default:
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			f()
			for g := range p.work {
				g()
			}
		}()
	}
}

// close ends the pool's goroutines, once no world runs operations any more.
func (p *pool) close() {
	close(p.work)
	p.wg.Wait()
}

func (w *world) send(o *op, s step, gate int) {
	if gate == s.fail {
		o.resume <- cmdFail
		return
	}
	o.resume <- cmdExec
}

// wait waits for o, which will not stop again (dead or auto), to finish.
func (w *world) wait(o *op) string {
	ev := <-w.events
	if ev.op != o || !ev.done {
		panic(fmt.Sprintf("explore: operation %d stopped while %d was finishing", ev.op.id, o.id))
	}
	w.running = nil
	return ev.at
}

// finish ends every stopped operation, in the order they started: killed
// (it never resumes: a crash, or a caller that gave up after a lost reply)
// or resumed to completion. Every goroutine of the world has ended when it
// returns.
func (w *world) finish(kill bool) []string {
	var out []string
	for _, id := range slices.Sorted(maps.Keys(w.parked)) {
		o := w.parked[id]
		delete(w.parked, id)
		w.running = o
		if kill {
			o.resume <- cmdKill
			w.wait(o)
			out = append(out, fmt.Sprintf("%s killed before %s", o.name, o.at))
			continue
		}
		o.auto = true
		o.resume <- cmdExec
		res := w.wait(o)
		out = append(out, fmt.Sprintf("%s resumed at %s: %s", o.name, o.at, res))
	}
	return out
}

// killAll is finish's argument that kills every stopped operation.
const killAll = true

// runAuto runs an operation of kind k (catalog entry i) to completion.
func (w *world) runAuto(k kind, i int) (string, *op) {
	o := w.startOp(k, i, true, false)
	return w.wait(o), o
}

// settle brings the world to rest: stopped operations are killed (kill)
// or resumed to completion, the clock moves past Grace, Settle and the
// refund lease, and then, until nothing changes, the payment provider
// repeats every callback not answered yet (a provider retries for days) and
// each tenant's reconciler runs a round. It returns what it did, for the
// report.
func (w *world) settle(kinds []kind, kill bool) []string {
	w.step++
	out := w.finish(kill)
	w.mu.Lock()
	if w.hookDown {
		w.hookDown = false
		out = append(out, "the hook's outbox comes back")
	}
	for _, k := range slices.Sorted(maps.Keys(w.letGo)) {
		w.letGo[k]()
		delete(w.letGo, k)
		delete(w.facts.held, k)
		out = append(out, "the host lets go of "+k+"'s row")
	}
	w.mu.Unlock()
	out = append(out, w.provSettle()...)
	w.advance(settleAdvance)
	out = append(out, "clock +"+settleAdvance.String())
	for pass := 0; pass < 4; pass++ {
		active := false
		for i, k := range kinds {
			w.mu.Lock()
			repeat := k.payment != "" && w.facts.issued[k.payment] && !w.facts.acked[k.payment]
			w.mu.Unlock()
			if repeat {
				res, _ := w.runAuto(k, i)
				out = append(out, fmt.Sprintf("the provider repeats %s: %s", k.name, res))
				active = true
			}
		}
		for i, k := range kinds {
			if k.round != "" && k.twin < 0 {
				res, o := w.runAuto(k, i)
				out = append(out, fmt.Sprintf("%s: %s", k.name, res))
				active = active || o.active
			}
		}
		if !active {
			break
		}
	}
	return out
}
