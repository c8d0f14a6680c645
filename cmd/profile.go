package cmd

import (
	"os"
	"strings"

	"github.com/spf13/pflag"
	"go.temporal.io/sdk/contrib/envconfig"
)

// Client configuration the way Temporal users keep it: a profile of the
// Temporal CLI's TOML config file (temporal config set …) serves wdc too.
//
// Precedence, highest first: a flag given on the command line, its
// TEMPORAL_* environment variable, the profile, wdc's default.

// profileFlags are the global flags that pick the profile.
type profileFlags struct {
	profile    string
	configFile string
	// tlsCertData, tlsKeyData and tlsCAData are PEM the profile gives
	// inline instead of paths.
	tlsCertData, tlsKeyData, tlsCAData []byte
	// tlsSkipVerify is the profile's disable_host_verification.
	tlsSkipVerify bool
	// addressFromProfile: the profile named the server (self-contained
	// commands then use it instead of an embedded one).
	addressFromProfile bool
}

func (p *profileFlags) bind(f *pflag.FlagSet, getenv func(string) string) {
	f.StringVar(&p.profile, "profile", getenv("TEMPORAL_PROFILE"), `client profile of the Temporal CLI's config file, the same one 'temporal --profile' reads: address, namespace, api_key, tls (default: "default" when the file has it) (env TEMPORAL_PROFILE)`)
	f.StringVar(&p.configFile, "config-file", getenv("TEMPORAL_CONFIG_FILE"), "the Temporal CLI's TOML config file (env TEMPORAL_CONFIG_FILE; default <user config dir>/temporalio/temporal.toml)")
}

// envLookup is envconfig.EnvLookup over the CLI's getenv.
type envLookup func(string) string

func (e envLookup) Environ() []string {
	var out []string
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); e(k) != "" {
			out = append(out, k+"="+e(k))
		}
	}
	return out
}

func (e envLookup) LookupEnv(k string) (string, bool) {
	v := e(k)
	return v, v != ""
}

// applyProfile fills the connection settings that neither a flag nor its
// TEMPORAL_* variable set from the profile (--profile, else the file's
// "default" profile when there is one; no file is no profile). As in the
// Temporal CLI, an api_key without a [tls] section turns TLS on.
//
// Errors (usage errors): an unreadable or malformed file (named), a
// --profile the file does not have, a profile with a remote codec (wdc
// does not encode payloads through one).
func (g *globalOptions) applyProfile(flags *pflag.FlagSet, getenv func(string) string) error {
	prof, err := envconfig.LoadClientConfigProfile(envconfig.LoadClientConfigProfileOptions{
		ConfigFilePath: g.configFile, ConfigFileProfile: g.profile, ConfigFileStrict: false,
		DisableEnv: true, // the TEMPORAL_* variables are the flags' defaults already
		EnvLookup:  envLookup(getenv),
	})
	if err != nil {
		return usagef("--profile %q / --config-file %q: %v", g.profile, g.configFile, err)
	}
	if prof.Codec != nil && prof.Codec.Endpoint != "" {
		return usagef("--profile %q: codec.endpoint %q: wdc does not encode payloads through a remote codec; use a profile without one", g.profile, prof.Codec.Endpoint)
	}
	unset := func(flag, env string) bool { return !flags.Changed(flag) && getenv(env) == "" }
	set := func(dst *string, v, flag, env string) {
		if v != "" && unset(flag, env) {
			*dst = v
		}
	}
	g.addressFromProfile = prof.Address != "" && unset("address", "TEMPORAL_ADDRESS")
	set(&g.address, prof.Address, "address", "TEMPORAL_ADDRESS")
	set(&g.namespace, prof.Namespace, "namespace", "TEMPORAL_NAMESPACE")
	set(&g.apiKey, prof.APIKey, "api-key", "TEMPORAL_API_KEY")
	tls := prof.TLS
	if tls == nil && prof.APIKey != "" {
		tls = &envconfig.ClientConfigTLS{}
	}
	if tls == nil || tls.Disabled {
		return nil
	}
	if unset("tls", "TEMPORAL_TLS") {
		g.tls = true
	}
	set(&g.tlsCertPath, tls.ClientCertPath, "tls-cert-path", "TEMPORAL_TLS_CERT")
	set(&g.tlsKeyPath, tls.ClientKeyPath, "tls-key-path", "TEMPORAL_TLS_KEY")
	set(&g.tlsCAPath, tls.ServerCACertPath, "tls-ca-path", "TEMPORAL_TLS_CA")
	set(&g.tlsServerName, tls.ServerName, "tls-server-name", "TEMPORAL_TLS_SERVER_NAME")
	if unset("tls-cert-path", "TEMPORAL_TLS_CERT") && unset("tls-key-path", "TEMPORAL_TLS_KEY") {
		g.tlsCertData, g.tlsKeyData = tls.ClientCertData, tls.ClientKeyData
	}
	if unset("tls-ca-path", "TEMPORAL_TLS_CA") {
		g.tlsCAData = tls.ServerCACertData
	}
	g.tlsSkipVerify = tls.DisableHostVerification
	return nil
}
