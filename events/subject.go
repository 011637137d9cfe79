package events

import (
	"fmt"
	"strings"
)

// Subjects are ferry.<repo-token>.<kind>, for example
// ferry.repo-1a2b3c4d5e6f.base.ready. The kind is two tokens, so
// ferry.*.base.* selects every base event of every repository and
// ferry.<repo-token>.> everything about one repository.
//
// A store key may hold '.', which separates NATS subject tokens, so the
// repository token escapes it. The mapping is
//
//	A-Z a-z 0-9 '-'   kept as they are
//	any other byte    '_' and two lower-case hex digits ('.' → "_2e", '_' → "_5f")
//
// It is injective and reversible (RepoKeyOfToken), and its output holds no
// '.', '*', '>' or white space, so it is always exactly one subject token.
// Most keys (name-hash) pass through unchanged.

// SubjectRoot is the first token of every Ferry subject.
const SubjectRoot = "ferry"

// RepoToken maps a store key to its subject token.
func RepoToken(repoKey string) string {
	var b strings.Builder
	b.Grow(len(repoKey))
	for i := 0; i < len(repoKey); i++ {
		c := repoKey[i]
		if c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "_%02x", c)
	}
	return b.String()
}

// RepoKeyOfToken reverses RepoToken.
func RepoKeyOfToken(token string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(token); i++ {
		c := token[i]
		switch {
		case c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-':
			b.WriteByte(c)
		case c == '_' && i+2 < len(token) && isLowerHex(token[i+1]) && isLowerHex(token[i+2]):
			b.WriteByte(unhex(token[i+1])<<4 | unhex(token[i+2]))
			i += 2
		default:
			return "", fmt.Errorf("subject token %q is not an escaped repository key (at byte %d)", token, i)
		}
	}
	if b.Len() == 0 {
		return "", fmt.Errorf("empty subject token")
	}
	return b.String(), nil
}

func isLowerHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' }

func unhex(c byte) byte {
	if c <= '9' {
		return c - '0'
	}
	return c - 'a' + 10
}

// SubjectFor is the subject of events of kind k about the repository with
// store key repoKey.
func SubjectFor(repoKey string, k Kind) string {
	return SubjectRoot + "." + RepoToken(repoKey) + "." + string(k)
}

// Subject is the subject e is published on.
func Subject(e Event) string { return SubjectFor(e.EventHeader().RepoKey, e.Kind()) }

// SubjectAll selects events of kind k about every repository.
func SubjectAll(k Kind) string { return SubjectRoot + ".*." + string(k) }

// SubjectRepo selects every event about one repository.
func SubjectRepo(repoKey string) string { return SubjectRoot + "." + RepoToken(repoKey) + ".>" }

// ParseSubject splits a Ferry subject into the store key and the kind. The
// kind need not be known.
func ParseSubject(subject string) (repoKey string, k Kind, err error) {
	parts := strings.SplitN(subject, ".", 3)
	if len(parts) != 3 || parts[0] != SubjectRoot || !validKind(parts[2]) {
		return "", "", fmt.Errorf("subject %q is not ferry.<repo>.<kind>", subject)
	}
	repoKey, err = RepoKeyOfToken(parts[1])
	if err != nil {
		return "", "", fmt.Errorf("subject %q: %w", subject, err)
	}
	return repoKey, Kind(parts[2]), nil
}
