// Command img builds the image of one Go command for the test node, as
// cmd/image builds queue's: a static binary in an empty base, one layer,
// written as a tarball that `ctr images import` reads. The command is
// built in the module of the directory img runs in, so its version is the
// one that go.mod pins, or, given as pkg@version, at that version alone.
//
//	img -pkg knative.dev/serving/cmd/activator -ref e2e.test/activator:e2e -o activator.tar
//	img -pkg github.com/coredns/coredns@v1.15.0 -ref e2e.test/coredns:e2e -o coredns.tar
package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

func main() {
	pkg := flag.String("pkg", "", "the Go command to build (required)")
	ref := flag.String("ref", "", "the image's reference (required)")
	out := flag.String("o", "", "the tarball to write (required)")
	user := flag.String("user", "65532:65532", "the user the image runs as")
	flag.Parse()
	if *pkg == "" || *ref == "" || *out == "" || flag.NArg() > 0 {
		flag.Usage()
		os.Exit(2)
	}
	if err := build(*pkg, *ref, *out, *user); err != nil {
		fmt.Fprintf(os.Stderr, "img: %v\n", err)
		os.Exit(1)
	}
}

func build(pkg, ref, out, user string) error {
	tag, err := name.NewTag(ref)
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "e2e-img-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	bin := filepath.Join(tmp, "app")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	if mod, _, ok := strings.Cut(pkg, "@"); ok {
		// A command at a version of its own module (go install's
		// pkg@version), built with that module's go.mod alone.
		cmd = exec.Command("go", "install", "-trimpath", "-ldflags=-s -w", pkg)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOBIN="+tmp)
		bin = filepath.Join(tmp, path.Base(mod))
		pkg = mod
	}
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build %s: %w", pkg, err)
	}
	entry := "/" + path.Base(pkg)
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return layerOf(bin, entry[1:]) })
	if err != nil {
		return err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", "amd64"
	cfg.Created = v1.Time{Time: time.Unix(0, 0).UTC()}
	cfg.Config.Entrypoint = []string{entry}
	cfg.Config.User = user
	cfg.Config.Env = []string{"PATH=/", "KO_DATA_PATH=/var/run/ko"}
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		return err
	}
	return tarball.WriteToFile(out, tag, img)
}

// layerOf is the image's one layer: the binary at /NAME, executable, and
// an empty /tmp that any user may write.
func layerOf(bin, name string) (io.ReadCloser, error) {
	b, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	epoch := time.Unix(0, 0).UTC()
	if err := tw.WriteHeader(&tar.Header{Name: "tmp/", Typeflag: tar.TypeDir, Mode: 0o1777, ModTime: epoch}); err != nil {
		return nil, err
	}
	if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(b)), ModTime: epoch}); err != nil {
		return nil, err
	}
	if _, err := tw.Write(b); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return io.NopCloser(&buf), nil
}
