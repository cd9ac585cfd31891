//go:build !race

package explore

// defaultDepth is -explore.depth's default, and the test command's
// (internal/testenv/test.sh): since the reductions of issue 38 its run takes
// about 35 s on a 2-core machine (about 56 s of CPU), what depth 6 took
// before them; depth 8 takes about 4.5 minutes of CPU and 1 GB.
const defaultDepth = 7

// defaultReplayDepth is -replay.depth's default: its first-reaching
// sequences (about 4800) replay on SQLite in about 30 s of CPU.
const defaultReplayDepth = 4
