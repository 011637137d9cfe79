package bus

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ferrydev/ferry/events"
	"github.com/ferrydev/ferry/pkg/atomicfile"
	"github.com/ferrydev/ferry/pkg/store"
)

// The outbox of a repository is <store parent>/<repo key>/outbox. Each file
// is one encoded event, exactly the bytes that would have been published,
// named <id>.json; it is written atomically (atomicfile) and deleted only
// after JetStream acknowledged it. Forwarding derives the subject from the
// event's type and repo key without needing to know the kind, so an older
// Ferry forwards a newer one's events.
//
// Concurrency: any number of processes may forward at once. Two forwarders
// may publish the same file; the shared Nats-Msg-Id makes JetStream store it
// once (within DedupWindow). Deleting is safe because a file is never
// rewritten: its name is its unique id, and a file already removed by the
// other forwarder is skipped. A crash after the acknowledgement and before
// the delete only leaves a file that is forwarded, and dropped, again.

// MaxOutbox bounds the files in one outbox. On a machine where no bus ever
// runs every one-shot command queues its event; past this many the oldest
// are deleted. Nothing depends on old events (consumers reconcile from the
// store on start), and the store stays bounded.
const MaxOutbox = 10000

// OutboxDir is the outbox of the repository with store key repoKey.
func OutboxDir(parent, repoKey string) string {
	return store.OutboxDir(parent, repoKey)
}

// Queue writes ev to its repository's outbox under the store parent, for a
// caller that knows it cannot publish now.
func Queue(parent string, ev events.Event) error {
	data, err := events.Encode(ev)
	if err != nil {
		return err
	}
	return queue(parent, ev.EventHeader(), data)
}

func queue(parent string, h *events.Header, data []byte) error {
	if parent == "" {
		return fmt.Errorf("queue event %s: no store parent for the outbox", h.ID)
	}
	dir := OutboxDir(parent, h.RepoKey)
	if err := store.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("queue event %s: %w", h.ID, err)
	}
	if err := atomicfile.WriteFile(store.OutboxFile(dir, h.ID), data, 0o644); err != nil {
		return fmt.Errorf("queue event %s: %w", h.ID, err)
	}
	return prune(dir)
}

// prune deletes the oldest files of an outbox holding more than MaxOutbox.
func prune(dir string) error {
	files, err := outboxFiles(dir)
	if err != nil || len(files) <= MaxOutbox {
		return err
	}
	for _, f := range files[:len(files)-MaxOutbox] {
		if err := os.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// outboxFiles lists the queued events of one outbox, oldest first (ids
// begin with their creation time). Temporary files of atomicfile begin with
// a dot and are never listed.
func outboxFiles(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if n := e.Name(); e.Type().IsRegular() && strings.HasSuffix(n, ".json") && !strings.HasPrefix(n, ".") {
			out = append(out, filepath.Join(dir, n))
		}
	}
	sort.Strings(out)
	return out, nil
}

// Pending lists the queued event files under the store parent, oldest first.
func Pending(parent string) ([]string, error) {
	if parent == "" {
		return nil, nil
	}
	dirs, err := filepath.Glob(store.OutboxGlob(parent))
	if err != nil {
		return nil, err
	}
	var all []string
	for _, d := range dirs {
		files, err := outboxFiles(d)
		if err != nil {
			return nil, err
		}
		all = append(all, files...)
	}
	sort.Slice(all, func(i, j int) bool { return filepath.Base(all[i]) < filepath.Base(all[j]) })
	return all, nil
}

// Flush forwards every queued event under the store parent, oldest first,
// each with its id as Nats-Msg-Id, and deletes each file after its
// acknowledgement. It returns how many it forwarded. It stops at the first
// failure to publish (the bus went away: the rest waits for the next
// flush). A file that is not an event is renamed to <name>.bad and one whose
// subject no stream takes is left for a newer Ferry; both are reported in
// the error without stopping the flush.
func (c *Conn) Flush(ctx context.Context) (int, error) {
	files, err := Pending(c.cfg.Parent)
	if err != nil {
		return 0, fmt.Errorf("flush outbox: %w", err)
	}
	n := 0
	var skipped []error
	for _, f := range files {
		if err := ctx.Err(); err != nil {
			return n, errors.Join(append(skipped, err)...)
		}
		data, err := os.ReadFile(f)
		if errors.Is(err, fs.ErrNotExist) {
			continue // forwarded by a concurrent flush
		}
		if err != nil {
			return n, errors.Join(append(skipped, fmt.Errorf("flush outbox: %w", err))...)
		}
		subject, id, err := outboxSubject(f, data)
		if err != nil {
			if rerr := os.Rename(f, f+".bad"); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
				err = errors.Join(err, rerr)
			}
			skipped = append(skipped, err)
			continue
		}
		if _, err := c.publish(ctx, subject, id, data); err != nil {
			if errors.Is(err, jetstream.ErrNoStreamResponse) {
				skipped = append(skipped, fmt.Errorf("flush outbox: %s: no stream takes %s; left for a newer Ferry", f, subject))
				continue
			}
			return n, errors.Join(append(skipped, fmt.Errorf("flush outbox: %w", err))...)
		}
		if err := os.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return n, errors.Join(append(skipped, fmt.Errorf("flush outbox: %w", err))...)
		}
		n++
	}
	return n, errors.Join(skipped...)
}

// outboxSubject reads the subject and id of a queued event from its header.
func outboxSubject(file string, data []byte) (subject, id string, err error) {
	h, err := events.DecodeHeader(data)
	if err != nil {
		return "", "", fmt.Errorf("flush outbox: %s: %w", file, err)
	}
	k, _, ok := events.ParseType(h.Type)
	switch {
	case !ok:
		return "", "", fmt.Errorf("flush outbox: %s: type %q is not ferry.<kind>.v<N>", file, h.Type)
	case !events.ValidID(h.ID) || h.ID+".json" != filepath.Base(file):
		return "", "", fmt.Errorf("flush outbox: %s: id %q does not match the file name", file, h.ID)
	case !events.ValidRepoKey(h.RepoKey):
		return "", "", fmt.Errorf("flush outbox: %s: repo key %q is not a store key", file, h.RepoKey)
	}
	return events.SubjectFor(h.RepoKey, k), h.ID, nil
}
