package codec

import (
	"crypto/aes"
	"crypto/cipher"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"strings"
)

// Environment variables read by LoadKeyring.
const (
	// EnvKeys holds comma-separated "id:base64key" entries; the first is
	// the current key.
	EnvKeys = "EFFECTIVELY_CODEC_KEYS"
	// EnvKeyFile names a file of "id:base64key" lines; the first is the
	// current key. Blank lines and lines starting with # are ignored.
	EnvKeyFile = "EFFECTIVELY_CODEC_KEY_FILE"
)

// KeySize is the length of every key: AES-256.
const KeySize = 32

// maxIDLen bounds a key ID: it is stored in every payload's metadata.
const maxIDLen = 32

// Key is one named AES-256 key.
type Key struct {
	// ID names the key in the metadata of every payload it encrypts. It is
	// 1 to 32 characters of A-Z, a-z, 0-9, '.', '_' and '-', and must never
	// be reused for different key material.
	ID string
	// Secret is the key material: KeySize bytes.
	Secret []byte
}

// String describes k without its key material, so a Key in a log line or an
// error message leaks nothing.
func (k Key) String() string {
	return fmt.Sprintf("codec.Key{ID: %q, Secret: [redacted %d bytes]}", k.ID, len(k.Secret))
}

// GoString is String, so %#v redacts too.
func (k Key) GoString() string { return k.String() }

// Keyring holds the current key, which encrypts, and older keys, which only
// decrypt payloads written before a rotation. A Keyring is immutable and
// safe for concurrent use.
type Keyring struct {
	current string
	ids     []string
	aeads   map[string]cipher.AEAD
}

// NewKeyring returns a keyring whose current key is keys[0]; the others
// decrypt only. It copies the key material. IDs must be valid and distinct
// and every key KeySize bytes long.
func NewKeyring(keys ...Key) (*Keyring, error) {
	if len(keys) == 0 {
		return nil, errors.New("codec: a keyring needs at least one key")
	}
	kr := &Keyring{current: keys[0].ID, aeads: make(map[string]cipher.AEAD, len(keys))}
	for i, k := range keys {
		if err := checkKey(k.ID, len(k.Secret)); err != nil {
			return nil, fmt.Errorf("codec: key %d%s: %w", i+1, idNote(k.ID), err)
		}
		if _, dup := kr.aeads[k.ID]; dup {
			return nil, fmt.Errorf("codec: key %d: duplicate key id %q", i+1, k.ID)
		}
		aead, err := newAEAD(k.Secret)
		if err != nil {
			return nil, fmt.Errorf("codec: key %d (id %q): %w", i+1, k.ID, err)
		}
		kr.aeads[k.ID] = aead
		kr.ids = append(kr.ids, k.ID)
	}
	return kr, nil
}

// CurrentID is the ID of the key that encrypts new payloads.
func (kr *Keyring) CurrentID() string { return kr.current }

// IDs lists every key ID, the current one first.
func (kr *Keyring) IDs() []string { return append([]string(nil), kr.ids...) }

func newAEAD(secret []byte) (cipher.AEAD, error) {
	block, err := aes.NewCipher(secret) // copies the key schedule: secret may be reused
	if err != nil {
		return nil, fmt.Errorf("new cipher: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("new gcm: %w", err)
	}
	return aead, nil
}

// checkKey validates an ID and a key length. Its errors never hold key
// material.
func checkKey(id string, n int) error {
	if !validID(id) {
		return fmt.Errorf("key id must be 1 to %d characters of A-Z a-z 0-9 . _ -", maxIDLen)
	}
	if n != KeySize {
		return fmt.Errorf("key is %d bytes, want %d (AES-256)", n, KeySize)
	}
	return nil
}

func validID(id string) bool {
	if id == "" || len(id) > maxIDLen {
		return false
	}
	for _, r := range id {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '_', r == '-':
		default:
			return false
		}
	}
	return true
}

// idNote names a key in an error, only when its ID is valid: an invalid ID
// may be key material pasted in the wrong place.
func idNote(id string) string {
	if !validID(id) {
		return ""
	}
	return fmt.Sprintf(" (id %q)", id)
}

// LoadKeyring reads the keyring from EFFECTIVELY_CODEC_KEYS or from the file
// named by EFFECTIVELY_CODEC_KEY_FILE, through lookup (os.LookupEnv in
// main). It reports ok=false, with a nil error, when neither is set or both
// are empty: the codec is then off. Setting both is an error, as is any bad
// entry; errors name the variable, the entry and its key ID, never key
// material.
func LoadKeyring(lookup func(string) (string, bool)) (kr *Keyring, ok bool, err error) {
	inline, _ := lookup(EnvKeys)
	file, _ := lookup(EnvKeyFile)
	inline, file = strings.TrimSpace(inline), strings.TrimSpace(file)
	var keys []Key
	switch {
	case inline == "" && file == "":
		return nil, false, nil
	case inline != "" && file != "":
		return nil, false, fmt.Errorf("codec: set %s or %s, not both", EnvKeys, EnvKeyFile)
	case inline != "":
		keys, err = parseKeys(strings.Split(inline, ","), "entry")
		if err != nil {
			return nil, false, fmt.Errorf("codec: %s %w", EnvKeys, err)
		}
	default:
		text, rerr := os.ReadFile(file)
		if rerr != nil {
			return nil, false, fmt.Errorf("codec: %s: read key file: %w", EnvKeyFile, rerr)
		}
		keys, err = parseKeys(strings.Split(string(text), "\n"), "line")
		if err != nil {
			return nil, false, fmt.Errorf("codec: %s (%s) %w", EnvKeyFile, file, err)
		}
	}
	kr, err = NewKeyring(keys...)
	if err != nil {
		return nil, false, err
	}
	return kr, true, nil
}

// parseKeys parses "id:base64key" entries, one per element of entries, as
// LoadKeyring does; blank entries and entries starting with # are skipped.
// unit names an entry in errors ("entry", "line"), counted from 1. Errors
// name the entry and, when it is valid, its ID; never key material.
func parseKeys(entries []string, unit string) ([]Key, error) {
	var keys []Key
	seen := make(map[string]bool)
	for i, e := range entries {
		e = strings.TrimSpace(e)
		if e == "" || strings.HasPrefix(e, "#") {
			continue
		}
		id, b64, found := strings.Cut(e, ":")
		id, b64 = strings.TrimSpace(id), strings.TrimSpace(b64)
		at := fmt.Sprintf("%s %d%s", unit, i+1, idNote(id))
		if !found {
			return nil, fmt.Errorf("%s %d: want id:base64key", unit, i+1)
		}
		if !validID(id) {
			return nil, fmt.Errorf("%s: %w", at, checkKey(id, KeySize))
		}
		if seen[id] {
			return nil, fmt.Errorf("%s: duplicate key id", at)
		}
		seen[id] = true
		secret, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			return nil, fmt.Errorf("%s: key is not valid standard base64", at)
		}
		if err := checkKey(id, len(secret)); err != nil {
			return nil, fmt.Errorf("%s: %w", at, err)
		}
		keys = append(keys, Key{ID: id, Secret: secret})
	}
	if len(keys) == 0 {
		return nil, errors.New("holds no key")
	}
	return keys, nil
}
