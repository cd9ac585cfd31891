//go:build !race

package explore

// defaultDepth is -explore.depth's default: since the reductions of issue
// 38 its exploration takes 42-71 s on a 2-core machine under other load
// (about 100 s of CPU with the replays beside it), and it is the depth
// where a batch release that forgets its lock id is found. The test
// command (internal/testenv/test.sh) runs depth 6, about 20 s: depth 7
// with the replays beside it took the package past its budget there.
// Depth 8 took about 4.5 minutes of CPU and 1 GB (before the rebase onto
// main's batch release and refund records).
const defaultDepth = 7

// defaultReplayDepth is -replay.depth's default: its first-reaching
// sequences (about 4800) replay on SQLite in about 30 s of CPU.
const defaultReplayDepth = 4
