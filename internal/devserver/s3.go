package devserver

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"

	"github.com/wdc-runtime/wdc/internal/devopts"
	"github.com/wdc-runtime/wdc/internal/s3gw"
)

// DefaultS3Bucket is the bucket a dev server's S3 endpoint creates unless
// told otherwise.
const DefaultS3Bucket = "wdc"

// credentialsFile is where a persistent S3 directory keeps its generated
// credentials (mode 0600).
const credentialsFile = "credentials"

// s3Endpoint is a dev server's running S3 gateway.
type s3Endpoint struct {
	gw      *s3gw.Gateway
	info    devopts.S3Info
	tempDir string // removed at stop; "" when persistent
}

// checkS3Options refuses S3 options that cannot work, before anything
// starts. Errors name the option as the CLI flag does (s3-port, s3-bucket).
func checkS3Options(opts Options) error {
	o := opts.S3
	if o.Port < 1 || o.Port > 65535 {
		return fmt.Errorf("s3-port %d: must be between 1 and 65535", o.Port)
	}
	if o.Port == opts.Port || (opts.EnableUI && o.Port == opts.UIPort) {
		return fmt.Errorf("s3-port %d: already taken by the frontend or the Web UI", o.Port)
	}
	if err := checkPortFree(opts.IP, o.Port); err != nil {
		return fmt.Errorf("s3-port %d: %w", o.Port, err)
	}
	if o.Bucket != "" && !devopts.ValidBucket(o.Bucket) {
		return fmt.Errorf("s3-bucket %q: not a valid bucket name (3-63 of a-z, 0-9, '.', '-')", o.Bucket)
	}
	if (o.AccessKey == "") != (o.SecretKey == "") {
		return errors.New("s3 credentials: give both the access key and the secret key, or neither")
	}
	return nil
}

// startS3 starts the gateway of opts.S3 (checked by checkS3Options) and
// creates its bucket.
func startS3(opts Options) (*s3Endpoint, error) {
	o := *opts.S3
	if o.Bucket == "" {
		o.Bucket = DefaultS3Bucket
	}
	e := &s3Endpoint{}
	dir := o.Dir
	switch {
	case dir != "":
	case opts.DBFilename != "":
		abs, err := filepath.Abs(opts.DBFilename)
		if err != nil {
			return nil, err
		}
		dir = abs + ".s3"
	default:
		tmp, err := os.MkdirTemp("", "wdc-dev-s3-")
		if err != nil {
			return nil, err
		}
		dir, e.tempDir = tmp, tmp
	}
	fail := func(err error) (*s3Endpoint, error) {
		if e.tempDir != "" {
			_ = os.RemoveAll(e.tempDir)
		}
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fail(fmt.Errorf("s3 directory: %w", err))
	}
	if o.AccessKey == "" {
		var err error
		if o.AccessKey, o.SecretKey, err = loadOrCreateCredentials(filepath.Join(dir, credentialsFile)); err != nil {
			return fail(err)
		}
	}
	addr := net.JoinHostPort(opts.IP, strconv.Itoa(o.Port))
	gw, err := s3gw.Start(s3gw.Options{Dir: dir, Addr: addr, AccessKey: o.AccessKey, SecretKey: o.SecretKey})
	if err != nil {
		return fail(fmt.Errorf("s3-port %d: %w", o.Port, err))
	}
	if err := gw.CreateBucket(o.Bucket); err != nil {
		_ = gw.Stop()
		return fail(fmt.Errorf("s3-bucket: %w", err))
	}
	e.gw = gw
	host := advertisedIP(opts.IP)
	e.info = devopts.S3Info{
		Endpoint: gw.Endpoint(host), Bucket: o.Bucket, BlobURL: gw.URL(o.Bucket, host), Region: s3gw.Region,
		AccessKey: o.AccessKey, SecretKey: o.SecretKey, Dir: dir, Persistent: e.tempDir == "",
	}
	return e, nil
}

// stop stops the gateway and removes a temporary directory.
func (e *s3Endpoint) stop() error {
	err := e.gw.Stop()
	if e.tempDir != "" {
		err = errors.Join(err, os.RemoveAll(e.tempDir))
	}
	return err
}

// storedCredentials is the JSON of a credentials file.
type storedCredentials struct {
	AccessKeyID     string `json:"access_key_id"`
	SecretAccessKey string `json:"secret_access_key"`
}

// loadOrCreateCredentials reads the credentials at path, or generates new
// ones and writes them there (mode 0600, created exclusively) when the
// file does not exist. Errors: a file that is unreadable or malformed.
func loadOrCreateCredentials(path string) (access, secret string, err error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		c := storedCredentials{AccessKeyID: "wdc" + s3gw.RandomKey(8), SecretAccessKey: s3gw.RandomKey(20)}
		b, _ = json.Marshal(c)
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return "", "", fmt.Errorf("s3 credentials %s: %w", path, err)
		}
		_, werr := f.Write(append(b, '\n'))
		if err := errors.Join(werr, f.Sync(), f.Close()); err != nil {
			_ = os.Remove(path)
			return "", "", fmt.Errorf("s3 credentials %s: %w", path, err)
		}
		return c.AccessKeyID, c.SecretAccessKey, nil
	}
	if err != nil {
		return "", "", fmt.Errorf("s3 credentials %s: %w", path, err)
	}
	var c storedCredentials
	if err := json.Unmarshal(b, &c); err != nil || c.AccessKeyID == "" || c.SecretAccessKey == "" {
		return "", "", fmt.Errorf("s3 credentials %s: want {\"access_key_id\": …, \"secret_access_key\": …}", path)
	}
	return c.AccessKeyID, c.SecretAccessKey, nil
}

// advertisedIP is the IP other machines reach a service bound to ip at:
// ip itself, or for an unspecified ip (0.0.0.0, ::) the first non-loopback
// IPv4 address of an interface that is up (127.0.0.1 when there is none).
func advertisedIP(ip string) string {
	if p := net.ParseIP(ip); p != nil && !p.IsUnspecified() {
		return ip
	}
	ifaces, _ := net.Interfaces()
	for _, ifc := range ifaces {
		if ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() && !n.IP.IsLinkLocalUnicast() {
				return n.IP.String()
			}
		}
	}
	return "127.0.0.1"
}
