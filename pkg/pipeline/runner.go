package pipeline

import (
	"context"
	"time"

	"github.com/ferrydev/ferry/events"
	"github.com/ferrydev/ferry/pkg/base"
	"github.com/ferrydev/ferry/pkg/bus"
	"github.com/ferrydev/ferry/pkg/failure"
	"github.com/ferrydev/ferry/pkg/share"
)

// RunnerOptions configure the runner (ferry-base --follow --pull).
type RunnerOptions struct {
	Env
	Shim bool // warm through the shim, when the runner builds (RunnerBuilds)
	// Wait bounds how long one base.ready waits for its object to be
	// published completely (or for the bus to answer); 0 means
	// DefaultRunnerWait.
	Wait time.Duration
}

// DefaultRunnerWait is how long a runner waits for an announced object
// whose upload has not finished (a publisher slower than the runner) before
// it gives up on that announcement: a publisher that died mid-upload never
// finishes it, and the next base.ready brings a newer base.
const DefaultRunnerWait = 30 * time.Minute

// RunRunner installs each base the fleet announces instead of building it,
// until ctx ends: it consumes base.ready of every repository on the bus
// (the publisher's store key is its own: it names the publisher's
// checkout path) and pulls the object each names (share.Pull) when the
// commit is one of this repository's, fetching it from the default remote
// when it is missing. A new runner starts with the newest base.ready of
// each repository; afterwards its durable consumer keeps its place, so a
// runner that was stopped, or cut off from the bus, catches up on what it
// missed.
//
// It never builds unless [bus] runner-builds says so: an announced object
// not there yet (no bucket, no object, an upload still running) is waited
// for, with the message kept alive, up to o.Wait; a base.ready that names
// no object is skipped. A runner killed mid-pull leaves a partial base and
// the message unacknowledged: whoever gets it next (after the ack wait)
// discards the partial base and pulls again. A pull it made announces
// base.ready naming the object; a base already ready here is made current
// and not announced again, so runners do not answer each other forever.
func RunRunner(ctx context.Context, o RunnerOptions) error {
	e := o.Env
	conn, err := bus.DialWait(ctx, e.BusConfig("ferry-base"), func(err error) { e.Logf("outbox: %v", err) })
	if err != nil {
		return err
	}
	defer conn.Close()
	cons, err := consumer(ctx, e, conn, bus.ConsumerOptions{
		Durable:     bus.DurableName("ferry-runner", e.Store.Key, consumerHost(e)),
		Kinds:       []events.Kind{events.KindBaseReady},
		AckWait:     e.Settings.AckWait,
		DeliverLast: true,
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	name := bucketOf(e).Name
	if name == "" {
		name = share.DefaultBucket
	}
	e.Logf("runner: installing the bases the fleet announces (bucket %s)", name)
	for {
		m, err := next(ctx, cons, e)
		if m == nil || err != nil {
			return err
		}
		br, ok := m.Event.(*events.BaseReady)
		if !ok {
			m.Term("not a base.ready")
			continue
		}
		stop := m.KeepAlive() // heartbeat through long pulls and waits
		// The settings as they are now (trusted keys rotate).
		o.Env = o.Env.Reloaded()
		installOne(ctx, o, conn, br)
		stop()
		if ctx.Err() != nil {
			// Stopped: a partial pull was discarded; leave the
			// announcement for the next start.
			m.Nak(0)
			return nil
		}
		if err := m.Ack(ctx); err != nil && ctx.Err() == nil {
			// The bus went away after the work was done: the message is
			// redelivered, and the pull of a ready base is a no-op.
			e.Logf("acknowledge base.ready of %s: %v", Short(br.BaseID), err)
		}
	}
}

func bucketOf(e Env) share.Bucket {
	return share.Bucket{Name: e.Settings.BasesBucket, MaxBytes: e.Settings.BasesMaxBytes, Replicas: e.Settings.BusReplicas}
}

// installOne pulls the base br announces, waiting while it is not
// published yet and retrying while the bus does not answer, up to o.Wait;
// with [bus] runner-builds it builds what it cannot pull. It reports on
// the log only: a base it could not install is not the runner's failure.
func installOne(ctx context.Context, o RunnerOptions, conn *bus.Conn, br *events.BaseReady) {
	e := o.Env
	id := Short(br.BaseID)
	if !hasCommit(e, br.Commit) {
		// A commit pushed since this clone was made: fetch it.
		if _, err := e.Repo.Run(e.Repo.Top, "fetch", "--quiet"); err != nil {
			e.Logf("runner: fetch for %s: %v", Short(br.Commit), err)
		}
		if !hasCommit(e, br.Commit) {
			e.Logf("runner: base %s: commit %s is not in this repository (another repository's base?); skipped", id, Short(br.Commit))
			return
		}
	}
	bo := base.Options{Repo: e.Repo, Settings: e.Settings, Store: e.Store, Rev: br.Commit, Progress: e.Log, Prog: e.Prog, Shim: o.Shim}
	if br.Object == "" {
		if e.Settings.RunnerBuilds {
			e.Logf("runner: base %s was not published; building it ([bus] runner-builds)", id)
			runnerBuild(ctx, e, conn, bo)
			return
		}
		e.Logf("runner: base %s was announced without an object (its builder does not share bases: [bus] share-bases); skipped", id)
		return
	}
	wait := o.Wait
	if wait <= 0 {
		wait = DefaultRunnerWait
	}
	deadline := time.Now().Add(wait)
	pause := 250 * time.Millisecond
	var last string
	for {
		_, err := pull(ctx, e.OnConn(ctx, conn), conn, share.PullOptions{Build: bo, Bucket: bucketOf(e), Progress: e.Log}, false)
		if err == nil {
			return
		}
		if ctx.Err() != nil {
			return
		}
		// Not there yet, or the bus did not answer: wait and pull again.
		// Anything else (a mismatch, a corrupt object, a full disk) will
		// not change by waiting.
		transient := share.NotYet(err) || failure.KindOf(err) == failure.Internal
		if !transient || time.Now().After(deadline) {
			if transient {
				e.Logf("runner: gave up on base %s after %v: %v", id, wait, err)
			} else {
				e.Logf("runner: cannot pull base %s: %v", id, err)
			}
			if e.Settings.RunnerBuilds {
				e.Logf("runner: building base %s instead ([bus] runner-builds)", id)
				runnerBuild(ctx, e, conn, bo)
			}
			return
		}
		if msg := err.Error(); msg != last {
			e.Logf("runner: waiting for base %s: %v", id, err)
			last = msg
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(pause):
		}
		pause = min(pause*2, 5*time.Second)
	}
}

// runnerBuild builds a base the runner could not pull, announcing it as a
// build host would.
func runnerBuild(ctx context.Context, e Env, conn *bus.Conn, bo base.Options) {
	if _, err := BuildBase(ctx, e.OnConn(ctx, conn), bo); err != nil && ctx.Err() == nil {
		e.Logf("runner: build of %s failed: %v", Short(bo.Rev), err)
	}
}

func hasCommit(e Env, commit string) bool {
	_, err := e.Repo.Run(e.Repo.Top, "cat-file", "-e", commit+"^{commit}")
	return err == nil
}
