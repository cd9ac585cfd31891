//go:build !race

package explore

// defaultDepth is -explore.depth's default: the deepest bound whose run
// takes about two minutes on a 2-core machine.
const defaultDepth = 7
