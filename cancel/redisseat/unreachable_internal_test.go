package redisseat

import (
	"context"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
)

// Which errors make a cluster client reload its slot map: those that say the
// node was not reached, never a server's reply or the caller giving up.
func TestUnreachable(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	for err, want := range map[error]bool{
		nil:     false,
		refused: true,
		fmt.Errorf("%w: %w", context.DeadlineExceeded, refused):       true, // a dial timeout
		&net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}: true,
		io.EOF:                   true,
		redis.Nil:                false,
		context.Canceled:         false,
		context.DeadlineExceeded: false,
	} {
		assert.Equal(t, want, unreachable(err), "%v", err)
	}
	assert.False(t, unreachable(fmt.Errorf("wrapped: %w", redis.Nil)))
}
