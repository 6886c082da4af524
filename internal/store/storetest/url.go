package storetest

import "net/url"

// replaceDatabase returns the postgres URL raw with its database set to name.
func replaceDatabase(raw, name string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	u.Path = "/" + name
	return u.String()
}
