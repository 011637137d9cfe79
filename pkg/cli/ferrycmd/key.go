package ferrycmd

import (
	"fmt"
	goio "io"
	"os"

	"github.com/ferrydev/ferry/pkg/cli"
	"github.com/ferrydev/ferry/pkg/config"
	"github.com/ferrydev/ferry/pkg/failure"
	"github.com/ferrydev/ferry/pkg/git"
	"github.com/ferrydev/ferry/pkg/share"
)

type keyCmd struct {
	From string `name:"from" placeholder:"FILE|-" help:"Make the key in FILE (- reads stdin; PEM, as <store parent>/keys/signing.key holds it) this host's signing key, replacing any: how a fleet's build hosts, or CI runs given it as a secret, sign with one key."`
	JSON bool   `name:"json" help:"Print the key as JSON."`
}

// keyAnswer is what `ferry key --json` prints.
type keyAnswer struct {
	PublicKey string `json:"public_key"`
	Path      string `json:"path"`                // the private key's file
	Created   bool   `json:"created"`             // made by this call
	Installed bool   `json:"installed,omitempty"` // taken from --from by this call
}

// signingKey shows this host's signing key, making it when there is none:
// the key publishing signs bases with, whose public half runners list in
// [share] trusted-keys (package share's signing).
func signingKey(args []string, io cli.IO) int {
	var c keyCmd
	help := "Print this host's signing key: the public key runners must list in [share] trusted-keys (or FERRY_TRUSTED_KEYS) " +
		"to install the bases this host publishes. It is made on first use (ed25519, in <store parent>/keys/, mode 0600, " +
		"hidden from every sandbox). Rotate by trusting a new key beside the old one, replacing the key file, publishing again, " +
		"then dropping the old key."
	return cli.Run("ferry key", help,
		[]string{"ferry key", "ferry key --json", "ssh build-host ferry key   # on a runner: the key to list in [share] trusted-keys",
			`printf '%s\n' "$FERRY_SIGNING_KEY" | ferry key --from -   # a CI job signs with the key its secret holds`},
		&c, args, io, &c.JSON, func() error {
			// The store parent: the repository's settings where there is
			// one, the environment's and the defaults elsewhere.
			top, err := os.Getwd()
			if err != nil {
				return err
			}
			var settings *config.Settings
			var note string
			if repo, rerr := git.Open("."); rerr == nil {
				settings, note, err = cli.Settings(repo)
			} else {
				settings, err = config.Load(top, config.OSEnv())
			}
			if err != nil {
				return err
			}
			if note != "" {
				fmt.Fprintf(io.Stderr, "ferry key: warning: %s\n", note)
			}
			if c.From != "" {
				if err := installKey(io, c.From, settings.StoreParent); err != nil {
					return err
				}
			}
			s, created, err := share.EnsureSigner(settings.StoreParent)
			if err != nil {
				return err
			}
			if c.JSON {
				return cli.WriteJSON(io.Stdout, keyAnswer{PublicKey: s.Public(), Path: s.Path, Created: created, Installed: c.From != ""})
			}
			if created {
				fmt.Fprintf(io.Stderr, "ferry key: made a signing key in %s\n", s.Path)
			}
			fmt.Fprintln(io.Stdout, s.Public())
			fmt.Fprintf(io.Stderr, "ferry key: runners install this host's bases once the key above is in their [share] trusted-keys (or FERRY_TRUSTED_KEYS)\n")
			return nil
		})
}

// installKey makes the key in file (- for stdin) the signing key under
// store parent parent.
func installKey(io cli.IO, file, parent string) error {
	var data []byte
	var err error
	if file == "-" {
		data, err = goio.ReadAll(os.Stdin)
	} else {
		data, err = os.ReadFile(file)
	}
	if err != nil {
		return failure.Wrap(failure.Usage, err, "name a file holding a signing key (<store parent>/keys/signing.key on the host whose key it is), or - for stdin", "cannot read the key to install")
	}
	name := file
	if file == "-" {
		name = "standard input"
	}
	s, err := share.ParseSigner(data)
	if err != nil {
		return failure.Wrap(failure.Usage, err, "give the PEM file `ferry key` made (<store parent>/keys/signing.key), whole", "%s is not a Ferry signing key", name)
	}
	if err := s.WriteTo(parent); err != nil {
		return err
	}
	fmt.Fprintf(io.Stderr, "ferry key: installed the signing key from %s in %s\n", name, share.KeyPath(parent))
	return nil
}
