package soak

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Build compiles cmd/soakinstance (without -race: rocketmq-client-go has data
// races of its own, see internal/testenv/README.md, "Reliability") into dir.
func Build(dir string) (string, error) {
	bin := filepath.Join(dir, "soakinstance")
	root, err := moduleDir()
	if err != nil {
		return "", err
	}
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/soakinstance")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/soakinstance: %w: %s", err, out)
	}
	return bin, nil
}

// moduleDir is this module's directory (the soak's own go.mod).
func moduleDir() (string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/seatflow/orderexpiry/internal/soak").Output()
	if err != nil {
		return "", fmt.Errorf("go list -m: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// Instance is one soakinstance process, started again after each kill with
// the same arguments and event file.
type Instance struct {
	ID     string
	bin    string
	args   []string
	events string
	logf   string

	mu   sync.Mutex
	cmd  *exec.Cmd
	addr string
	done chan struct{}
}

// NewInstance describes an instance; Start runs it.
func NewInstance(id, bin, dir string, args ...string) *Instance {
	ev := filepath.Join(dir, id+".events")
	return &Instance{ID: id, bin: bin, events: ev, logf: filepath.Join(dir, id+".log"),
		args: append([]string{"-id", id, "-events", ev}, args...)}
}

// Start runs the process and waits until it serves HTTP (within timeout).
func (in *Instance) Start(timeout time.Duration) error {
	logf, err := os.OpenFile(in.logf, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(in.bin, in.args...)
	cmd.Stderr = logf
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	addrc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), "listening "); ok {
				addrc <- a
			}
		}
	}()
	go func() { _ = cmd.Wait(); _ = logf.Close(); close(done) }()
	in.mu.Lock()
	in.cmd, in.done, in.addr = cmd, done, ""
	in.mu.Unlock()
	select {
	case a := <-addrc:
		in.mu.Lock()
		in.addr = a
		in.mu.Unlock()
		return nil
	case <-done:
		return fmt.Errorf("instance %s exited at start (log %s)", in.ID, in.logf)
	case <-time.After(timeout):
		_ = cmd.Process.Kill()
		return fmt.Errorf("instance %s not serving after %v (log %s)", in.ID, timeout, in.logf)
	}
}

// Addr is the HTTP address while the instance runs ("" when it is down).
func (in *Instance) Addr() string {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.addr
}

// Pid is the running process's id.
func (in *Instance) Pid() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.cmd == nil || in.cmd.Process == nil {
		return 0
	}
	return in.cmd.Process.Pid
}

// Signal sends sig and waits until the process is gone (within timeout; then
// it is SIGKILLed).
func (in *Instance) Signal(sig syscall.Signal, timeout time.Duration) {
	in.mu.Lock()
	cmd, done := in.cmd, in.done
	in.addr = ""
	in.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
	case <-time.After(timeout):
		_ = cmd.Process.Kill()
		<-done
	}
}

// Line is one event line of an instance (cmd/soakinstance's Line).
type Line struct {
	T      int64  `json:"t"`
	I      string `json:"i"`
	K      string `json:"k"`
	O      string `json:"o,omitempty"`
	Out    string `json:"out,omitempty"`
	R      string `json:"r,omitempty"`
	N      int    `json:"n,omitempty"`
	B      string `json:"b,omitempty"`
	Q      int    `json:"q,omitempty"`
	Tp     string `json:"tp,omitempty"` // the queue's topic: the topic, or the group's retry topic (%RETRY%group) for a message handed back
	Off    int64  `json:"off,omitempty"`
	RC     int32  `json:"rc,omitempty"`
	Hop    int    `json:"hop,omitempty"`
	Pay    string `json:"pay,omitempty"`
	Err    string `json:"err,omitempty"`
	PID    int    `json:"pid,omitempty"`
	Extra  string `json:"x,omitempty"`
	Millis int64  `json:"ms,omitempty"`
}

// ReadEvents reads every complete line of the files (a line cut by a SIGKILL
// is skipped and counted).
func ReadEvents(files ...string) (lines []Line, torn int, err error) {
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			return nil, 0, err
		}
		sc := bufio.NewScanner(fh)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var l Line
			if json.Unmarshal(sc.Bytes(), &l) != nil {
				torn++
				continue
			}
			lines = append(lines, l)
		}
		_ = fh.Close()
	}
	return lines, torn, nil
}
