package ferrycmd

import (
	"fmt"
	"os"

	"github.com/ferrydev/ferry/pkg/cli"
	"github.com/ferrydev/ferry/pkg/config"
	"github.com/ferrydev/ferry/pkg/git"
	"github.com/ferrydev/ferry/pkg/share"
)

type keyCmd struct {
	JSON bool `name:"json" help:"Print the key as JSON."`
}

// keyAnswer is what `ferry key --json` prints.
type keyAnswer struct {
	PublicKey string `json:"public_key"`
	Path      string `json:"path"`    // the private key's file
	Created   bool   `json:"created"` // made by this call
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
		[]string{"ferry key", "ferry key --json", "ssh build-host ferry key   # on a runner: the key to list in [share] trusted-keys"},
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
			s, created, err := share.EnsureSigner(settings.StoreParent)
			if err != nil {
				return err
			}
			if c.JSON {
				return cli.WriteJSON(io.Stdout, keyAnswer{PublicKey: s.Public(), Path: s.Path, Created: created})
			}
			if created {
				fmt.Fprintf(io.Stderr, "ferry key: made a signing key in %s\n", s.Path)
			}
			fmt.Fprintln(io.Stdout, s.Public())
			fmt.Fprintf(io.Stderr, "ferry key: runners install this host's bases once the key above is in their [share] trusted-keys (or FERRY_TRUSTED_KEYS)\n")
			return nil
		})
}
