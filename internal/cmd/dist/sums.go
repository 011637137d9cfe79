package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

const sumsName = "SHA256SUMS"

// writeSumsFile writes dir/SHA256SUMS over the files named, in the format
// sha256sum writes and `sha256sum -c` reads: "<hex>  <name>", sorted by
// name.
func writeSumsFile(dir string, names []string) error {
	sums := map[string]string{}
	for _, n := range names {
		s, err := fileSHA256(filepath.Join(dir, n))
		if err != nil {
			return err
		}
		sums[n] = s
	}
	return os.WriteFile(filepath.Join(dir, sumsName), []byte(sumsText(sums)), 0o644)
}

// sumsText is the SHA256SUMS text for sums (name to hex digest).
func sumsText(sums map[string]string) string {
	names := make([]string, 0, len(sums))
	for n := range sums {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		fmt.Fprintf(&b, "%s  %s\n", sums[n], n)
	}
	return b.String()
}

// fileSHA256 is the hex SHA-256 digest of the file at p.
func fileSHA256(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
