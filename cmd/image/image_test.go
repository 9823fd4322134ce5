package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"debug/buildinfo"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// ociConfig is the part of an image configuration the test reads, decoded
// with encoding/json rather than the library that wrote it.
type ociConfig struct {
	OS           string `json:"os"`
	Architecture string `json:"architecture"`
	Config       struct {
		User         string              `json:"User"`
		Entrypoint   []string            `json:"Entrypoint"`
		Cmd          []string            `json:"Cmd"`
		ExposedPorts map[string]struct{} `json:"ExposedPorts"`
	} `json:"config"`
	RootFS struct {
		Type    string   `json:"type"`
		DiffIDs []string `json:"diff_ids"`
	} `json:"rootfs"`
}

type descriptor struct {
	MediaType string `json:"mediaType"`
	Digest    string `json:"digest"`
}

type ociManifest struct {
	Config descriptor   `json:"config"`
	Layers []descriptor `json:"layers"`
}

// TestImage builds the image in both forms, unpacks them with archive/tar
// and encoding/json, and checks what the README promises: one layer with
// one file, /queue, a static binary that does not link the image library,
// the entrypoint and the non-root user; then runs the unpacked binary and
// sends it a request.
func TestImage(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	o := options{
		tarPath:   filepath.Join(dir, "queue.tar"),
		layoutDir: filepath.Join(dir, "layout"),
		tag:       "queue:test",
		version:   "v0.0.0-test",
		commit:    "0123abc",
		arch:      runtime.GOARCH,
		created:   time.Unix(0, 0).UTC(),
	}
	// A cold build cache compiles all of queue's dependencies: minutes on
	// two cores, not hours.
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	digest, err := build(ctx, o)
	if err != nil {
		t.Fatal(err)
	}

	// The OCI layout: index.json -> manifest -> config and layer, each blob
	// named by its SHA-256.
	blob := func(d descriptor) []byte {
		t.Helper()
		algo, hexDigest, ok := strings.Cut(d.Digest, ":")
		if !ok || algo != "sha256" {
			t.Fatalf("digest %q, want sha256:...", d.Digest)
		}
		b, err := os.ReadFile(filepath.Join(o.layoutDir, "blobs", "sha256", hexDigest))
		if err != nil {
			t.Fatal(err)
		}
		if got := sha256Hex(b); got != hexDigest {
			t.Fatalf("blob %s has digest %s", hexDigest, got)
		}
		return b
	}
	var index struct {
		Manifests []struct {
			descriptor
			Annotations map[string]string `json:"annotations"`
		} `json:"manifests"`
	}
	readJSON(t, filepath.Join(o.layoutDir, "index.json"), &index)
	if got, want := len(index.Manifests), 1; got != want {
		t.Fatalf("index has %d manifests, want %d", got, want)
	}
	if got, want := index.Manifests[0].Digest, digest.String(); got != want {
		t.Errorf("index names manifest %s, build returned %s", got, want)
	}
	if got, want := index.Manifests[0].Annotations["org.opencontainers.image.ref.name"], o.tag; got != want {
		t.Errorf("ref.name = %q, want %q", got, want)
	}
	var m ociManifest
	unmarshal(t, blob(index.Manifests[0].descriptor), &m)
	if got, want := m.Config.MediaType, "application/vnd.oci.image.config.v1+json"; got != want {
		t.Errorf("config media type %q, want %q", got, want)
	}
	configJSON := blob(m.Config)
	var cfg ociConfig
	unmarshal(t, configJSON, &cfg)
	checkConfig(t, cfg)
	if got, want := len(m.Layers), 1; got != want {
		t.Fatalf("%d layers, want %d: the base is empty", got, want)
	}
	layerGz := blob(m.Layers[0])
	binary := checkLayer(t, layerGz, cfg.RootFS.DiffIDs[0])

	// The docker load tarball carries the same config and layer.
	checkDockerTarball(t, o, sha256Hex(configJSON), sha256Hex(layerGz))

	binPath := filepath.Join(dir, "queue")
	if err := os.WriteFile(binPath, binary, 0o755); err != nil {
		t.Fatal(err)
	}
	checkStatic(t, binPath)
	serveOnce(t, binPath)
}

func checkConfig(t *testing.T, cfg ociConfig) {
	t.Helper()
	if got, want := cfg.Config.Entrypoint, []string{"/queue"}; !slices.Equal(got, want) {
		t.Errorf("Entrypoint = %q, want %q", got, want)
	}
	if cfg.Config.Cmd != nil {
		t.Errorf("Cmd = %q, want none", cfg.Config.Cmd)
	}
	if got, want := cfg.Config.User, "65532:65532"; got != want {
		t.Errorf("User = %q, want %q", got, want)
	}
	if got, want := cfg.OS+"/"+cfg.Architecture, "linux/"+runtime.GOARCH; got != want {
		t.Errorf("platform %s, want %s", got, want)
	}
	for _, p := range []string{"8012/tcp", "8022/tcp", "9091/tcp"} {
		if _, ok := cfg.Config.ExposedPorts[p]; !ok {
			t.Errorf("ExposedPorts %v lacks %s", cfg.Config.ExposedPorts, p)
		}
	}
	if got, want := len(cfg.RootFS.DiffIDs), 1; cfg.RootFS.Type != "layers" || got != want {
		t.Fatalf("rootfs %+v, want one layer", cfg.RootFS)
	}
}

// checkLayer checks that the layer is one root-owned, executable, not
// user-writable file named queue, with the diff ID the config names, and
// returns the file.
func checkLayer(t *testing.T, layerGz []byte, diffID string) []byte {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(layerGz))
	if err != nil {
		t.Fatalf("layer is not gzip: %v", err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := "sha256:"+sha256Hex(raw), diffID; got != want {
		t.Errorf("layer diff ID %s, config says %s", got, want)
	}
	tr := tar.NewReader(bytes.NewReader(raw))
	var file []byte
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if path.Clean(h.Name) != "queue" || h.Typeflag != tar.TypeReg {
			t.Errorf("layer holds %q (type %c), want only the file queue", h.Name, h.Typeflag)
			continue
		}
		if got, want := h.Mode, int64(0o755); got != want {
			t.Errorf("queue has mode %o, want %o", got, want)
		}
		if h.Uid != 0 || h.Gid != 0 {
			t.Errorf("queue is owned by %d:%d, want 0:0 (the user cannot change it)", h.Uid, h.Gid)
		}
		if file, err = io.ReadAll(tr); err != nil {
			t.Fatal(err)
		}
	}
	if file == nil {
		t.Fatal("layer has no queue binary")
	}
	return file
}

// checkDockerTarball reads the docker load tarball's manifest.json and
// checks that its config and layer are the OCI layout's.
func checkDockerTarball(t *testing.T, o options, configHex, layerHex string) {
	t.Helper()
	f, err := os.Open(o.tarPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	files := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if files[h.Name], err = io.ReadAll(tr); err != nil {
			t.Fatal(err)
		}
	}
	var manifest []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	unmarshal(t, files["manifest.json"], &manifest)
	if len(manifest) != 1 || len(manifest[0].Layers) != 1 {
		t.Fatalf("manifest.json = %+v, want one image with one layer", manifest)
	}
	if got, want := manifest[0].RepoTags, []string{o.tag}; !slices.Equal(got, want) {
		t.Errorf("RepoTags = %q, want %q", got, want)
	}
	if got := sha256Hex(files[manifest[0].Config]); got != configHex {
		t.Errorf("tarball config %s, OCI layout config %s", got, configHex)
	}
	if got := sha256Hex(files[manifest[0].Layers[0]]); got != layerHex {
		t.Errorf("tarball layer %s, OCI layout layer %s", got, layerHex)
	}
}

// checkStatic: no dynamic loader, no dynamic section, built without cgo
// and with -trimpath, and the image library not linked.
func checkStatic(t *testing.T, bin string) {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatalf("not an ELF file: %v", err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("program header %v: the binary is dynamically linked", p.Type)
		}
	}
	for _, name := range []string{".interp", ".dynamic"} {
		if f.Section(name) != nil {
			t.Errorf("section %s: the binary is dynamically linked", name)
		}
	}
	if f.Section(".symtab") != nil {
		t.Errorf("section .symtab: the binary was not built with -s")
	}
	bi, err := buildinfo.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	if settings["CGO_ENABLED"] != "0" || settings["-trimpath"] != "true" {
		t.Errorf("build settings CGO_ENABLED=%q -trimpath=%q, want 0 and true", settings["CGO_ENABLED"], settings["-trimpath"])
	}
	for _, d := range bi.Deps {
		if strings.HasPrefix(d.Path, "github.com/google/go-containerregistry") {
			t.Errorf("queue links %s: only the image command may", d.Path)
		}
	}
}

// serveOnce runs the unpacked binary as queue demo on ephemeral loopback
// ports, sends one request through it, then SIGTERM: it must exit 0.
func serveOnce(t *testing.T, bin string) {
	t.Helper()
	cmd := exec.Command(bin, "demo", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0",
		"--stats-listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	addr := make(chan string, 1)
	go func() {
		// "queue demo: an echo upstream on A, queue in front of it on B."
		re := regexp.MustCompile(`in front of it on (\S+?)\.$`)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				addr <- m[1]
			}
		}
		exited <- cmd.Wait()
	}()
	defer func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			<-exited
		}
	}()
	var listen string
	select {
	case listen = <-addr:
	case err := <-exited:
		t.Fatalf("queue demo exited before serving: %v\n%s", err, stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("queue demo printed no address\n%s", stderr.String())
	}
	client := &http.Client{Timeout: 10 * time.Second}
	res, err := client.Get("http://" + listen + "/hello")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if got, want := res.StatusCode, http.StatusOK; got != want {
		t.Errorf("GET /hello = %d %q, want %d", got, body, want)
	}
	if !bytes.Contains(body, []byte(`"uri": "/hello"`)) {
		t.Errorf("GET /hello answered %q, want the echo of the request", body)
	}
	client.CloseIdleConnections()

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("after SIGTERM: %v, want exit 0\n%s", err, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("still running 10s after SIGTERM\n%s", stderr.String())
	}
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func readJSON(t *testing.T, file string, v any) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	unmarshal(t, b, v)
}

func unmarshal(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("decode %.60q: %v", b, err)
	}
}

// TestSourceDateEpoch: the creation time is reproducible.
func TestSourceDateEpoch(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		in      string
		want    time.Time
		wantErr bool
	}{
		{name: "unset is the epoch", in: "", want: time.Unix(0, 0).UTC()},
		{name: "seconds", in: "1700000000", want: time.Unix(1700000000, 0).UTC()},
		{name: "not a number", in: "yesterday", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := sourceDateEpoch(tt.in)
			if (err != nil) != tt.wantErr {
				t.Fatalf("sourceDateEpoch(%q) error %v, want error %v", tt.in, err, tt.wantErr)
			}
			if !got.Equal(tt.want) {
				t.Errorf("sourceDateEpoch(%q) = %v, want %v", tt.in, got, tt.want)
			}
		})
	}
}
