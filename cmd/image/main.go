// Command image builds queue's container image with no registry, no base
// image and no Docker daemon: an empty (scratch) base and one layer that
// holds the static binary at /queue, run as 65532:65532.
//
//	go run ./cmd/image -o queue.tar        # docker load -i queue.tar
//	go run ./cmd/image -oci-layout image/  # an OCI image layout directory
//
// It lives in queue's module, as its own command, so that it builds the
// binary from the very source and go.mod it sits next to, and its test runs
// in the one test command; go-containerregistry is linked only into this
// command, never into queue (the test checks the binary's build info).
package main

import (
	"archive/tar"
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The image's fixed parts; the Dockerfile makes the same.
const (
	// queuePackage is what goes into the image.
	queuePackage = "github.com/queue-dev/queue/cmd/queue"
	// binaryPath is the only file in the image, and its entrypoint.
	binaryPath = "/queue"
	// user is distroless' "nonroot": no name is needed, so the image has
	// no /etc/passwd.
	user = "65532:65532"
)

// exposedPorts are queue's default ports: serving, TLS serving, admin,
// Knative's autoscaler Stat and Prometheus (docs/contract.md section 1.2). EXPOSE is
// documentation; standalone the Stat is on loopback.
var exposedPorts = []string{"8012/tcp", "8112/tcp", "8022/tcp", "9090/tcp", "9091/tcp"}

// options are the command's flags.
type options struct {
	tarPath   string // a tarball for docker load; "" for none
	layoutDir string // an OCI image layout; "" for none
	tag       string
	version   string
	commit    string
	arch      string
	created   time.Time
}

func main() {
	var o options
	flag.StringVar(&o.tarPath, "o", "queue.tar", "write a tarball that `docker load` and `podman load` read; empty for none")
	flag.StringVar(&o.layoutDir, "oci-layout", "", "also write an OCI image layout to `DIR`")
	flag.StringVar(&o.tag, "tag", "", "image reference in the tarball (default queue:VERSION)")
	flag.StringVar(&o.version, "version", "dev", "version the binary reports (main.version)")
	flag.StringVar(&o.commit, "commit", "", "commit the binary reports (main.commit); default from git")
	flag.StringVar(&o.arch, "arch", runtime.GOARCH, "GOARCH of the image (GOOS is linux)")
	flag.Parse()
	if flag.NArg() > 0 || (o.tarPath == "" && o.layoutDir == "") {
		fmt.Fprintln(os.Stderr, "usage: go run ./cmd/image [-o queue.tar] [-oci-layout DIR] [-tag REF] [-version V] [-commit C] [-arch GOARCH]")
		os.Exit(2)
	}
	if o.tag == "" {
		o.tag = "queue:" + o.version
	}
	if o.commit == "" {
		if out, err := exec.Command("git", "rev-parse", "HEAD").Output(); err == nil {
			o.commit = strings.TrimSpace(string(out))
		}
	}
	var err error
	if o.created, err = sourceDateEpoch(os.Getenv("SOURCE_DATE_EPOCH")); err != nil {
		fmt.Fprintf(os.Stderr, "image: %v\n", err)
		os.Exit(2)
	}
	digest, err := build(context.Background(), o)
	if err != nil {
		fmt.Fprintf(os.Stderr, "image: %v\n", err)
		os.Exit(1)
	}
	fmt.Printf("%s %s\n", o.tag, digest)
	if o.tarPath != "" {
		fmt.Printf("load it with: docker load -i %s\n", o.tarPath)
	}
}

// sourceDateEpoch is the image's creation time: SOURCE_DATE_EPOCH
// (reproducible-builds.org) or else the Unix epoch, so that the same
// source gives the same image digest.
func sourceDateEpoch(v string) (time.Time, error) {
	if v == "" {
		return time.Unix(0, 0).UTC(), nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH %q: want seconds since 1970", v)
	}
	return time.Unix(n, 0).UTC(), nil
}

// build compiles queue and writes the image where o says. It returns the
// image's manifest digest.
func build(ctx context.Context, o options) (v1.Hash, error) {
	tmp, err := os.MkdirTemp("", "queue-image-")
	if err != nil {
		return v1.Hash{}, err
	}
	defer os.RemoveAll(tmp)
	bin := filepath.Join(tmp, "queue")
	if err := compile(ctx, bin, o); err != nil {
		return v1.Hash{}, err
	}
	img, err := assemble(bin, o)
	if err != nil {
		return v1.Hash{}, err
	}
	digest, err := img.Digest()
	if err != nil {
		return v1.Hash{}, fmt.Errorf("digest image: %w", err)
	}
	if o.tarPath != "" {
		ref, err := name.NewTag(o.tag)
		if err != nil {
			return v1.Hash{}, fmt.Errorf("parse -tag %q: %w", o.tag, err)
		}
		if err := os.MkdirAll(filepath.Dir(o.tarPath), 0o755); err != nil {
			return v1.Hash{}, err
		}
		if err := tarball.WriteToFile(o.tarPath, ref, img); err != nil {
			return v1.Hash{}, fmt.Errorf("write %s: %w", o.tarPath, err)
		}
	}
	if o.layoutDir != "" {
		p, err := layout.Write(o.layoutDir, empty.Index)
		if err != nil {
			return v1.Hash{}, fmt.Errorf("write OCI layout %s: %w", o.layoutDir, err)
		}
		if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{
			"org.opencontainers.image.ref.name": o.tag,
		})); err != nil {
			return v1.Hash{}, fmt.Errorf("write OCI layout %s: %w", o.layoutDir, err)
		}
	}
	return digest, nil
}

// compile builds the static binary: no cgo (no libc, no dynamic loader),
// no file system paths and no symbol tables in it.
func compile(ctx context.Context, out string, o options) error {
	ldflags := "-s -w -X main.version=" + o.version
	if o.commit != "" {
		ldflags += " -X main.commit=" + o.commit
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", ldflags, "-o", out, queuePackage)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+o.arch)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %w\n%s", queuePackage, err, b)
	}
	return nil
}

// assemble makes the image: the empty base, one layer with the binary,
// and the configuration that runs it.
func assemble(bin string, o options) (v1.Image, error) {
	layerTar, err := binaryLayer(bin, o.created)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("make layer: %w", err)
	}
	base := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	base = mutate.ConfigMediaType(base, types.OCIConfigJSON)
	img, err := mutate.Append(base, mutate.Addendum{
		Layer:     layer,
		MediaType: types.OCILayer,
		History: v1.History{
			Created:   v1.Time{Time: o.created},
			CreatedBy: "go run ./cmd/image: CGO_ENABLED=0 go build -trimpath -ldflags=-s -w " + queuePackage,
			Comment:   "the static queue binary at " + binaryPath,
		},
	})
	if err != nil {
		return nil, fmt.Errorf("add layer: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", o.arch
	cf.Created = v1.Time{Time: o.created}
	cf.Config.Entrypoint = []string{binaryPath}
	cf.Config.Cmd = nil
	cf.Config.User = user
	cf.Config.WorkingDir = "/"
	cf.Config.ExposedPorts = map[string]struct{}{}
	for _, p := range exposedPorts {
		cf.Config.ExposedPorts[p] = struct{}{}
	}
	cf.Config.Labels = map[string]string{
		"org.opencontainers.image.title":   "queue",
		"org.opencontainers.image.version": o.version,
	}
	if o.commit != "" {
		cf.Config.Labels["org.opencontainers.image.revision"] = o.commit
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("set config: %w", err)
	}
	return img, nil
}

// binaryLayer is an uncompressed layer with one file, /queue, owned by
// root and not writable by the user that runs it.
func binaryLayer(bin string, mtime time.Time) ([]byte, error) {
	data, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	hdr := &tar.Header{
		Typeflag: tar.TypeReg,
		Name:     strings.TrimPrefix(binaryPath, "/"),
		Mode:     0o755,
		Size:     int64(len(data)),
		ModTime:  mtime,
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return nil, fmt.Errorf("write layer: %w", err)
	}
	if _, err := tw.Write(data); err != nil {
		return nil, fmt.Errorf("write layer: %w", err)
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("write layer: %w", err)
	}
	return buf.Bytes(), nil
}
