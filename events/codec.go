package events

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// UnknownTypeError reports an event whose type this Ferry does not read: an
// unknown kind, another version of a known kind, or a type that is not of
// the form "ferry.<kind>.v<N>". A consumer terminates the message: waiting
// does not make it readable.
type UnknownTypeError struct {
	Type    string // as found
	Kind    Kind   // parsed, when Type has the form
	Version int    // parsed, when Type has the form
}

func (e *UnknownTypeError) Error() string {
	if e.Kind.Known() {
		return fmt.Sprintf("event type %q: version %d of %s is not known (this Ferry reads v%d)",
			e.Type, e.Version, e.Kind, e.Kind.Version())
	}
	return fmt.Sprintf("event type %q is not known", e.Type)
}

// MalformedError reports bytes that are not a valid event: not a JSON
// object, no type, a field of the wrong JSON type, or a missing or invalid
// required field.
type MalformedError struct {
	Type     string   // the type, when one could be read
	Problems []string // what is wrong, one item per field
	Err      error    // the JSON error, if any
}

func (e *MalformedError) Error() string {
	var b strings.Builder
	b.WriteString("malformed event")
	if e.Type != "" {
		fmt.Fprintf(&b, " %q", e.Type)
	}
	if len(e.Problems) > 0 {
		b.WriteString(": ")
		b.WriteString(strings.Join(e.Problems, "; "))
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

func (e *MalformedError) Unwrap() error { return e.Err }

// Undecodable reports whether err says a message can never be decoded by
// this Ferry (an *UnknownTypeError or a *MalformedError anywhere in its
// chain): a consumer logs it and terminates the message instead of letting
// it be redelivered.
func Undecodable(err error) bool {
	var u *UnknownTypeError
	var m *MalformedError
	return errors.As(err, &u) || errors.As(err, &m)
}

// Validate checks e's header (type matching its kind, id, time, repo key,
// host) and its payload's required fields. The error is a *MalformedError.
func Validate(e Event) error {
	p := e.EventHeader().check(e.Kind())
	p = append(p, e.check()...)
	if len(p) > 0 {
		return &MalformedError{Type: e.EventHeader().Type, Problems: p}
	}
	return nil
}

// Encode validates e and returns its JSON: one flat object holding the
// header and payload fields.
func Encode(e Event) ([]byte, error) {
	if err := Validate(e); err != nil {
		return nil, fmt.Errorf("encode %s event: %w", e.Kind(), err)
	}
	data, err := json.Marshal(e)
	if err != nil {
		return nil, fmt.Errorf("encode %s event: %w", e.Kind(), err)
	}
	return data, nil
}

// DecodeHeader reads only the header of an encoded event, without knowing
// its kind or validating anything beyond it being a JSON object.
func DecodeHeader(data []byte) (Header, error) {
	var h Header
	if err := json.Unmarshal(data, &h); err != nil {
		return Header{}, &MalformedError{Problems: []string{"not a JSON event object"}, Err: err}
	}
	return h, nil
}

// Decode parses an encoded event into its Go type (for example *BaseReady),
// ignoring unknown fields. An event of a type this Ferry does not read is an
// *UnknownTypeError; anything else that is not a valid event is a
// *MalformedError.
func Decode(data []byte) (Event, error) {
	h, err := DecodeHeader(data)
	if err != nil {
		return nil, err
	}
	if h.Type == "" {
		return nil, &MalformedError{Problems: []string{"type is missing"}}
	}
	k, v, ok := ParseType(h.Type)
	if !ok {
		return nil, &UnknownTypeError{Type: h.Type}
	}
	if !k.Known() || v != k.Version() {
		return nil, &UnknownTypeError{Type: h.Type, Kind: k, Version: v}
	}
	e := kinds[k].make()
	if err := json.Unmarshal(data, e); err != nil {
		return nil, &MalformedError{Type: h.Type, Err: err}
	}
	if err := Validate(e); err != nil {
		return nil, err
	}
	return e, nil
}
