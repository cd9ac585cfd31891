//go:build !race

package explore

// defaultDepth is -explore.depth's default: the deepest bound whose run
// takes about two minutes on a 2-core machine.
const defaultDepth = 7

// defaultReplayDepth is -replay.depth's default: its first-reaching
// sequences (about 4800) replay on SQLite in about 30 s of CPU.
const defaultReplayDepth = 4
