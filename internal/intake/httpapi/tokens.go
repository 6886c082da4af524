package httpapi

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Token is one line of the tokens file: a client allowed to submit the
// message types it names, and nothing else.
type Token struct {
	// Name identifies the client in logs and metrics; never the token.
	Name string
	// Types are the message types the token may submit and read.
	Types []string
}

// May reports whether the token may submit or read messages of typ.
func (t Token) May(typ string) bool { return slices.Contains(t.Types, typ) }

// Tokens is the set of bearer tokens, read from a file of SHA-256 hashes
// and read again when the file changes (checked at most once a second), so
// a token is added or revoked without a restart. A file that no longer
// parses keeps the previous set, with an error logged.
type Tokens struct {
	path   string
	logger *slog.Logger
	rate   float64
	burst  int

	mu       sync.Mutex
	byHash   map[[32]byte]Token
	limiters map[string]*rate.Limiter
	stamp    fileStamp
	checked  time.Time
}

type fileStamp struct {
	mod  time.Time
	size int64
}

// LoadTokens reads the tokens file at path. Each line is
//
//	NAME sha256:HEX TYPE[,TYPE…]
//
// (blank lines and lines starting with # are skipped): HEX is the SHA-256 of
// the token, as `printf %s "$TOKEN" | sha256sum` prints it. perSecond and
// burst bound each token's requests.
func LoadTokens(path string, perSecond float64, burst int, logger *slog.Logger) (*Tokens, error) {
	if logger == nil {
		logger = slog.Default()
	}
	t := &Tokens{path: path, logger: logger, rate: perSecond, burst: burst, limiters: map[string]*rate.Limiter{}}
	st, set, err := readTokens(path)
	if err != nil {
		return nil, err
	}
	t.byHash, t.stamp, t.checked = set, st, time.Now()
	return t, nil
}

// Lookup returns the token whose SHA-256 is that of secret, and its limiter.
func (t *Tokens) Lookup(secret string) (Token, *rate.Limiter, bool) {
	sum := sha256.Sum256([]byte(secret))
	t.mu.Lock()
	defer t.mu.Unlock()
	t.reloadLocked()
	tok, ok := t.byHash[sum]
	if !ok {
		return Token{}, nil, false
	}
	lim := t.limiters[tok.Name]
	if lim == nil {
		lim = rate.NewLimiter(rate.Limit(t.rate), t.burst)
		t.limiters[tok.Name] = lim
	}
	return tok, lim, true
}

// reloadLocked reads the file again when its size or time changed.
func (t *Tokens) reloadLocked() {
	if time.Since(t.checked) < time.Second {
		return
	}
	t.checked = time.Now()
	fi, err := os.Stat(t.path)
	if err != nil {
		t.logger.Error("api tokens file unreadable: keeping the tokens read before", "path", t.path, "error", err.Error())
		return
	}
	if (fileStamp{fi.ModTime(), fi.Size()}) == t.stamp {
		return
	}
	st, set, err := readTokens(t.path)
	if err != nil {
		t.logger.Error("api tokens file does not parse: keeping the tokens read before", "path", t.path, "error", err.Error())
		return
	}
	t.byHash, t.stamp = set, st
	t.logger.Info("api tokens file read again", "path", t.path, "tokens", len(set))
}

// forceReload makes the next Lookup check the file (tests).
func (t *Tokens) forceReload() {
	t.mu.Lock()
	t.checked = time.Time{}
	t.mu.Unlock()
}

func readTokens(path string) (fileStamp, map[[32]byte]Token, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{}, nil, fmt.Errorf("api tokens file: %w", err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return fileStamp{}, nil, fmt.Errorf("api tokens file: %w", err)
	}
	set, err := ParseTokens(raw)
	if err != nil {
		return fileStamp{}, nil, fmt.Errorf("api tokens file %s: %w", path, err)
	}
	return fileStamp{fi.ModTime(), fi.Size()}, set, nil
}

// ParseTokens parses the tokens file's content (see LoadTokens).
func ParseTokens(raw []byte) (map[[32]byte]Token, error) {
	set := map[[32]byte]Token{}
	names := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 3 {
			return nil, fmt.Errorf("line %d: want NAME sha256:HEX TYPE[,TYPE…], got %d fields", n, len(f))
		}
		name, hash, types := f[0], f[1], f[2]
		if names[name] {
			return nil, fmt.Errorf("line %d: name %q is used twice", n, name)
		}
		h, ok := strings.CutPrefix(hash, "sha256:")
		b, err := hex.DecodeString(h)
		if !ok || err != nil || len(b) != sha256.Size {
			return nil, fmt.Errorf("line %d (%s): the token must be given as sha256: and 64 hex digits, never in clear", n, name)
		}
		var sum [32]byte
		copy(sum[:], b)
		if _, dup := set[sum]; dup {
			return nil, fmt.Errorf("line %d (%s): the same token hash is listed twice", n, name)
		}
		tok := Token{Name: name}
		for _, typ := range strings.Split(types, ",") {
			if typ == "" {
				return nil, fmt.Errorf("line %d (%s): empty message type", n, name)
			}
			tok.Types = append(tok.Types, typ)
		}
		names[name] = true
		set[sum] = tok
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(set) == 0 {
		return nil, errors.New("no token: the API would refuse every request")
	}
	return set, nil
}

// HashToken returns the tokens file's form of secret ("sha256:HEX").
func HashToken(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return "sha256:" + hex.EncodeToString(sum[:])
}
