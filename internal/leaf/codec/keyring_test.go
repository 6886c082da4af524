package codec

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// testKey returns a deterministic 32-byte key, distinct per seed.
func testKey(id string, seed byte) Key {
	secret := make([]byte, KeySize)
	for i := range secret {
		secret[i] = seed + byte(i)*7
	}
	return Key{ID: id, Secret: secret}
}

func b64(k Key) string { return base64.StdEncoding.EncodeToString(k.Secret) }

func env(vars map[string]string) func(string) (string, bool) {
	return func(name string) (string, bool) {
		v, ok := vars[name]
		return v, ok
	}
}

func TestLoadKeyring(t *testing.T) {
	k1, k2 := testKey("k1", 1), testKey("k2", 2)
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "keys")
	if err := os.WriteFile(keyFile, fmt.Appendf(nil, "# rotated 2026-01-02\n\nk2:%s\n  k1:%s  \n", b64(k2), b64(k1)), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		env     map[string]string
		wantOK  bool
		wantIDs []string
	}{
		{name: "unset", env: nil},
		{name: "empty", env: map[string]string{EnvKeys: "", EnvKeyFile: "  "}},
		{name: "one key", env: map[string]string{EnvKeys: "k1:" + b64(k1)}, wantOK: true, wantIDs: []string{"k1"}},
		{name: "rotated, spaces and trailing comma", env: map[string]string{EnvKeys: " k2:" + b64(k2) + " , k1:" + b64(k1) + ","}, wantOK: true, wantIDs: []string{"k2", "k1"}},
		{name: "file", env: map[string]string{EnvKeyFile: keyFile}, wantOK: true, wantIDs: []string{"k2", "k1"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			kr, ok, err := LoadKeyring(env(c.env))
			if err != nil || ok != c.wantOK {
				t.Fatalf("LoadKeyring = ok %v, err %v; want ok %v", ok, err, c.wantOK)
			}
			if !ok {
				if kr != nil {
					t.Errorf("keyring = %v, want nil when off", kr)
				}
				return
			}
			if got := kr.IDs(); !slices.Equal(got, c.wantIDs) || kr.CurrentID() != c.wantIDs[0] {
				t.Errorf("IDs = %v, current %q; want %v", got, kr.CurrentID(), c.wantIDs)
			}
		})
	}
}

// TestLoadKeyringErrors checks that every bad configuration is refused with
// an error naming the variable and the entry, and never quoting key material.
func TestLoadKeyringErrors(t *testing.T) {
	k1, k2 := testKey("k1", 1), testKey("k2", 2)
	short := base64.StdEncoding.EncodeToString(k1.Secret[:16])
	long := base64.StdEncoding.EncodeToString(append(slices.Clone(k1.Secret), 1, 2, 3))
	notB64 := "!!" + b64(k2)[2:]
	dir := t.TempDir()
	badFile := filepath.Join(dir, "keys")
	if err := os.WriteFile(badFile, []byte("# keys\nk2:"+b64(k2)+"\nk1:"+short+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// secrets lists every string that must never appear in an error.
	secrets := []string{b64(k1), b64(k2), short, long, notB64, string(k1.Secret), string(k2.Secret)}
	cases := []struct {
		name string
		env  map[string]string
		want []string // substrings of the error
	}{
		{"wrong length", map[string]string{EnvKeys: "k1:" + short}, []string{EnvKeys, "entry 1", `"k1"`, "16 bytes", "want 32"}},
		{"too long", map[string]string{EnvKeys: "k2:" + b64(k2) + ",k1:" + long}, []string{EnvKeys, "entry 2", `"k1"`, "35 bytes"}},
		{"bad base64", map[string]string{EnvKeys: "k2:" + notB64}, []string{EnvKeys, "entry 1", `"k2"`, "base64"}},
		{"duplicate id", map[string]string{EnvKeys: "k1:" + b64(k1) + ",k1:" + b64(k2)}, []string{EnvKeys, "entry 2", `"k1"`, "duplicate"}},
		{"no id", map[string]string{EnvKeys: b64(k1)}, []string{EnvKeys, "entry 1", "id:base64key"}},
		{"reversed entry", map[string]string{EnvKeys: b64(k1) + ":k1"}, []string{EnvKeys, "entry 1", "key id"}},
		{"empty id", map[string]string{EnvKeys: ":" + b64(k1)}, []string{EnvKeys, "entry 1", "key id"}},
		{"only commas", map[string]string{EnvKeys: " , ,"}, []string{EnvKeys, "no key"}},
		{"both set", map[string]string{EnvKeys: "k1:" + b64(k1), EnvKeyFile: badFile}, []string{EnvKeys, EnvKeyFile, "not both"}},
		{"missing file", map[string]string{EnvKeyFile: filepath.Join(dir, "nope")}, []string{EnvKeyFile, "read key file"}},
		{"bad file line", map[string]string{EnvKeyFile: badFile}, []string{EnvKeyFile, badFile, "line 3", `"k1"`, "16 bytes"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			kr, ok, err := LoadKeyring(env(c.env))
			if err == nil || ok || kr != nil {
				t.Fatalf("LoadKeyring = %v, %v, %v; want an error", kr, ok, err)
			}
			msg := err.Error()
			for _, w := range c.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not mention %q", msg, w)
				}
			}
			for _, s := range secrets {
				if strings.Contains(msg, s) {
					t.Errorf("error %q contains key material", msg)
				}
			}
		})
	}
}

func TestNewKeyringErrors(t *testing.T) {
	k := testKey("k1", 1)
	cases := []struct {
		name string
		keys []Key
		want string
	}{
		{"none", nil, "at least one key"},
		{"short", []Key{{ID: "k1", Secret: k.Secret[:31]}}, "31 bytes"},
		{"bad id", []Key{{ID: "k 1", Secret: k.Secret}}, "key id"},
		{"duplicate", []Key{k, testKey("k1", 9)}, "duplicate key id"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := NewKeyring(c.keys...)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("NewKeyring error = %v, want one mentioning %q", err, c.want)
			}
		})
	}
}

func TestKeyFormattingRedactsSecret(t *testing.T) {
	k := testKey("k1", 1)
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%x", "%q"} {
		got := fmt.Sprintf(verb, k)
		if strings.Contains(got, b64(k)) || bytes.Contains([]byte(got), k.Secret) ||
			strings.Contains(got, fmt.Sprintf("%x", k.Secret)) || strings.Contains(got, fmt.Sprintf("%d", k.Secret)) {
			t.Errorf("Sprintf(%s, key) = %q: shows key material", verb, got)
		}
	}
}

// FuzzParseKeys checks that parsing never panics, that accepted keys are
// valid, and that a rejection never quotes a key-sized secret.
func FuzzParseKeys(f *testing.F) {
	k1, k2 := testKey("k1", 1), testKey("k2", 2)
	f.Add("k1:" + b64(k1))
	f.Add("k2:" + b64(k2) + ",k1:" + b64(k1))
	f.Add("k1:" + b64(k1) + ",k1:" + b64(k2))
	f.Add(b64(k1) + ":k1")
	f.Add("k1:" + b64(k1)[:20])
	f.Add("# c\n\nk1:" + b64(k1))
	f.Add(",,:")
	f.Fuzz(func(t *testing.T, s string) {
		keys, err := parseKeys(strings.Split(s, ","), "entry")
		if err != nil {
			for e := range strings.SplitSeq(s, ",") {
				_, secret, _ := strings.Cut(e, ":")
				if secret = strings.TrimSpace(secret); len(secret) >= 40 && strings.Contains(err.Error(), secret) {
					t.Fatalf("error %q quotes the secret %q", err, secret)
				}
			}
			return
		}
		if _, err := NewKeyring(keys...); err != nil {
			t.Fatalf("parsed keys make no keyring: %v", err)
		}
	})
}
