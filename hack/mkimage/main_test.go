package main

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"strings"
	"testing"
)

// entries lists a layer tar: path → "TYPEFLAG MODE" or "TYPEFLAG -> TARGET".
func entries(t *testing.T, b []byte) map[string]string {
	t.Helper()
	out := map[string]string{}
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		v := string(h.Typeflag)
		switch h.Typeflag {
		case tar.TypeSymlink:
			v += " -> " + h.Linkname
		case tar.TypeDir, tar.TypeReg:
			v += fmt.Sprintf(" %04o", h.Mode)
		}
		out["/"+strings.TrimSuffix(h.Name, "/")] = v
	}
}
