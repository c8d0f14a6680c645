package devserver

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wdc-runtime/wdc/internal/devopts"
)

// Every S3 option the dev server cannot work with is refused before
// anything starts, naming the option as the CLI flag does.
func TestCheckS3OptionsRefusals(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	busy := l.Addr().(*net.TCPAddr).Port
	base := Options{IP: "127.0.0.1", Port: 7233, UIPort: 8233, EnableUI: true}
	for _, tc := range []struct {
		name string
		s3   devopts.S3Options
		want string
	}{
		{"port zero", devopts.S3Options{Port: 0}, "s3-port 0: must be between 1 and 65535"},
		{"port too high", devopts.S3Options{Port: 70000}, "s3-port 70000: must be between 1 and 65535"},
		{"frontend's port", devopts.S3Options{Port: 7233}, "s3-port 7233: already taken by the frontend or the Web UI"},
		{"ui's port", devopts.S3Options{Port: 8233}, "s3-port 8233: already taken"},
		{"busy port", devopts.S3Options{Port: busy}, "s3-port " + strconv.Itoa(busy) + ": cannot listen on"},
		{"bad bucket", devopts.S3Options{Port: 1, Bucket: "no_underscores"}, `s3-bucket "no_underscores": not a valid bucket name`},
		{"access key alone", devopts.S3Options{Port: 1, AccessKey: "AK"}, "give both the access key and the secret key, or neither"},
		{"secret key alone", devopts.S3Options{Port: 1, SecretKey: "SK"}, "give both"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := base
			s3 := tc.s3
			if s3.Port == 1 { // a free port: the check under test comes later
				fl, err := net.Listen("tcp", "127.0.0.1:0")
				require.NoError(t, err)
				s3.Port = fl.Addr().(*net.TCPAddr).Port
				fl.Close()
			}
			o.S3 = &s3
			assert.ErrorContains(t, checkS3Options(o), tc.want)
		})
	}
	o := base
	o.EnableUI = false
	o.S3 = &devopts.S3Options{Port: 8233}
	if l2, err := net.Listen("tcp", "127.0.0.1:8233"); err == nil { // headless: the UI's port is free to use
		l2.Close()
		assert.NoError(t, checkS3Options(o))
	}
}

// Credentials are generated once (0600) and read back; a damaged file is
// refused with its path rather than replaced.
func TestCredentialsFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "credentials")
	a1, s1, err := loadOrCreateCredentials(p)
	require.NoError(t, err)
	assert.NotEmpty(t, a1)
	assert.Len(t, s1, 40)
	fi, err := os.Stat(p)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	a2, s2, err := loadOrCreateCredentials(p)
	require.NoError(t, err)
	assert.Equal(t, [2]string{a1, s1}, [2]string{a2, s2})

	for name, content := range map[string]string{"not json": "AKIA…", "empty secret": `{"access_key_id":"a","secret_access_key":""}`} {
		bad := filepath.Join(t.TempDir(), "credentials")
		require.NoError(t, os.WriteFile(bad, []byte(content), 0o600))
		_, _, err := loadOrCreateCredentials(bad)
		assert.ErrorContains(t, err, "s3 credentials "+bad+": want", name)
	}
	_, _, err = loadOrCreateCredentials(filepath.Join(t.TempDir(), "missing-dir", "credentials"))
	assert.ErrorContains(t, err, "s3 credentials")
}

func TestAdvertisedIP(t *testing.T) {
	assert.Equal(t, "10.1.2.3", advertisedIP("10.1.2.3"))
	ip := net.ParseIP(advertisedIP("0.0.0.0"))
	require.NotNil(t, ip)
	assert.NotNil(t, ip.To4())
	assert.False(t, ip.IsUnspecified())
}

// The internal services' ports are distinct and never one the options
// name: the S3 gateway and the Web UI bind theirs after those services.
func TestFreePortsAvoidsTheNamedPorts(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	taken := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())
	for range 20 {
		ports, err := freePorts("127.0.0.1", 3, []int{taken})
		require.NoError(t, err)
		require.Len(t, ports, 3)
		assert.NotContains(t, ports, taken)
		assert.NotEqual(t, ports[0], ports[1])
		assert.NotEqual(t, ports[1], ports[2])
		assert.NotEqual(t, ports[0], ports[2])
	}
}
