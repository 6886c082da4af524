package message

import (
	"errors"
	"fmt"
	"net/mail"
	"strings"
)

// Limits on e-mail addresses, from RFC 5321 as corrected by erratum 1690.
const (
	maxEmailLen  = 254
	maxLocalLen  = 64
	maxLabelLen  = 63
	maxDomainLen = 253
)

// ValidateEmail reports whether addr is a single, bare, deliverable e-mail
// address such as "ada@example.com". It rejects:
//
//   - the empty string and addresses longer than 254 bytes;
//   - control characters (U+0000 to U+001F, U+007F) and any non-ASCII
//     character: internationalized addresses are not supported;
//   - anything net/mail does not parse as exactly one address, including
//     lists such as "a@example.com, b@example.com";
//   - display names ("Ada <ada@example.com>"), angle brackets, comments,
//     quoted local parts and surrounding spaces: the address must be written
//     exactly as net/mail would write it back;
//   - local parts longer than 64 bytes, and domains that are not host names
//     of at least two dot-separated labels of letters, digits and hyphens
//     (so no "localhost" and no "[192.0.2.1]").
//
// The error describes the problem; it reads well after a field name, as in
// "customer_email: email address has a display name". It never repeats the
// address or any part of it longer than one character, so that it can be
// logged and stored with a quarantined message without spreading personal
// data.
func ValidateEmail(addr string) error {
	if addr == "" {
		return errors.New("email address is empty")
	}
	if len(addr) > maxEmailLen {
		return fmt.Errorf("email address is %d bytes, the limit is %d", len(addr), maxEmailLen)
	}
	for i := 0; i < len(addr); i++ {
		switch c := addr[i]; {
		case c < 0x20 || c == 0x7F:
			return fmt.Errorf("email address contains control character %q at byte %d", c, i)
		case c >= 0x80:
			return fmt.Errorf("email address contains a non-ASCII character at byte %d; only ASCII addresses are accepted", i)
		}
	}
	if list, err := mail.ParseAddressList(addr); err == nil && len(list) > 1 {
		return fmt.Errorf("email address field holds %d addresses; exactly one is allowed", len(list))
	}
	a, err := mail.ParseAddress(addr)
	if err != nil {
		return fmt.Errorf("email address is not valid: %s", mailProblem(err))
	}
	if a.Name != "" {
		return errors.New("email address has a display name; give only the address, like ada@example.com")
	}
	if a.Address != addr {
		return errors.New("email address must be a bare address like ada@example.com, without angle brackets, comments, quotes or spaces")
	}
	at := strings.LastIndexByte(addr, '@')
	local, domain := addr[:at], addr[at+1:]
	if len(local) > maxLocalLen {
		return fmt.Errorf("email address has a local part of %d bytes, the limit is %d", len(local), maxLocalLen)
	}
	if err := validateDomain(domain); err != nil {
		return fmt.Errorf("email address domain %w", err)
	}
	return nil
}

// validateDomain checks that domain is a host name with at least two labels.
// Its errors complete the sentence "domain X ...".
func validateDomain(domain string) error {
	if len(domain) > maxDomainLen {
		return fmt.Errorf("is %d bytes, the limit is %d", len(domain), maxDomainLen)
	}
	labels := strings.Split(domain, ".")
	if len(labels) < 2 {
		return errors.New("must have at least two labels, like example.com")
	}
	for _, l := range labels {
		if l == "" || len(l) > maxLabelLen {
			return fmt.Errorf("has a label of %d characters; labels are 1 to %d", len(l), maxLabelLen)
		}
		if l[0] == '-' || l[len(l)-1] == '-' {
			return errors.New("has a label that starts or ends with a hyphen")
		}
		for i := 0; i < len(l); i++ {
			c := l[i]
			if !isAlnum(c) && c != '-' {
				return fmt.Errorf("has character %q; host names have only letters, digits, hyphens and dots", c)
			}
		}
	}
	tld := labels[len(labels)-1]
	if strings.Trim(tld, "0123456789") == "" {
		return errors.New("has an all-numeric top-level label")
	}
	return nil
}

// mailProblem is net/mail's description of a parse error without the input
// it quotes: its messages that repeat the input do so after ": " or ", got "
// (as in `expected single address, got "…"`), and the fixed ones have
// neither.
func mailProblem(err error) string {
	msg := strings.TrimPrefix(err.Error(), "mail: ")
	for _, sep := range []string{": ", ", got "} {
		msg, _, _ = strings.Cut(msg, sep)
	}
	return msg
}
