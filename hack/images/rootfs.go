package images

import (
	"archive/tar"
	"bytes"
	"encoding/pem"
	"io"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/crypto/x509roots/fallback/bundle"
)

// CAFile is where an image holds its CA certificates: the first place Go's
// crypto/x509 looks on Linux.
const CAFile = "/etc/ssl/certs/ca-certificates.crt"

// nonroot is the account of User, with a home directory of its own.
const (
	nonrootUID = 65532
	passwd     = "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"
	group      = "root:x:0:\nnonroot:x:65532:\n"
)

// file is one entry of a layer: a directory when its name ends in "/".
type file struct {
	name     string // relative to the root
	mode     int64
	uid, gid int
	data     []byte
}

// baseLayer is the layer every image starts from: the accounts, the CA
// certificates and the usual directories, and no shell or other program.
// It is the same for every image and platform, so a registry holds it
// once.
var baseLayer = sync.OnceValues(func() (v1.Layer, error) {
	return layer([]file{
		{name: "etc/", mode: 0o755},
		{name: "etc/passwd", mode: 0o644, data: []byte(passwd)},
		{name: "etc/group", mode: 0o644, data: []byte(group)},
		{name: "etc/ssl/", mode: 0o755},
		{name: "etc/ssl/certs/", mode: 0o755},
		{name: strings.TrimPrefix(CAFile, "/"), mode: 0o644, data: caCertificates()},
		{name: "home/", mode: 0o755},
		{name: "home/nonroot/", mode: 0o700, uid: nonrootUID, gid: nonrootUID},
		{name: "root/", mode: 0o700},
		{name: "tmp/", mode: 0o1777},
	})
})

// binaryLayer is the layer holding an image's one program, name, in
// binDir.
func binaryLayer(name string, exe []byte) (v1.Layer, error) {
	rel := strings.TrimPrefix(binDir, "/")
	files := []file{{name: path.Join(rel, name), mode: 0o755, data: exe}}
	for d := rel; d != "."; d = path.Dir(d) {
		files = append(files, file{name: d + "/", mode: 0o755})
	}
	return layer(files)
}

// caCertificates is a PEM bundle of the roots that Mozilla's NSS trusts
// for TLS servers, as the x509roots/fallback module pinned in go.mod has
// them: the same file on every machine that builds the image. A root that
// NSS trusts only for certificates issued before a date is left out, since
// a PEM file cannot carry that constraint and without it the root would be
// trusted for what NSS no longer trusts.
func caCertificates() []byte {
	var b bytes.Buffer
	for r := range bundle.Roots() {
		if r.Constraint != nil {
			continue
		}
		// Writing to a bytes.Buffer does not fail.
		_ = pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: r.Certificate})
	}
	return b.Bytes()
}

// epoch is the modification time of every file: a layer's digest depends
// on its contents alone, so an unchanged layer is shared across builds.
var epoch = time.Unix(0, 0).UTC()

// layer is a gzipped OCI layer of files, in name order (so parents come
// before their children), each owned by its numeric ids at epoch.
func layer(files []file) (v1.Layer, error) {
	files = slices.Clone(files)
	slices.SortFunc(files, func(a, b file) int { return strings.Compare(a.name, b.name) })
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		hdr := &tar.Header{
			Name:     f.name,
			Mode:     f.mode,
			Uid:      f.uid,
			Gid:      f.gid,
			ModTime:  epoch,
			Typeflag: tar.TypeReg,
			Size:     int64(len(f.data)),
			Format:   tar.FormatUSTAR,
		}
		if strings.HasSuffix(f.name, "/") {
			hdr.Typeflag = tar.TypeDir
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
}
