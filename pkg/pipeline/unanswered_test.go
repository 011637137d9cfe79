package pipeline

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Only "nobody answered in time" is waited out; a refusal is returned.
func TestUnanswered(t *testing.T) {
	for _, err := range []error{
		context.DeadlineExceeded, nats.ErrTimeout, nats.ErrNoResponders,
		fmt.Errorf("consumer x on FERRY_COMMITS: %w", jetstream.ErrNoStreamResponse),
	} {
		if !unanswered(err) {
			t.Errorf("%v: not treated as unanswered", err)
		}
	}
	for _, err := range []error{
		errors.New("multiple consumer filter subjects not supported"), jetstream.ErrConsumerNameAlreadyInUse,
	} {
		if unanswered(err) {
			t.Errorf("%v: a refusal treated as unanswered", err)
		}
	}
}
