package codec_test

import (
	"fmt"
	"log"

	"github.com/effectively/effectively/internal/leaf/codec"
)

// ExampleLoadKeyring loads a rotated keyring: k2 encrypts, k1 only decrypts
// payloads written before the rotation. In main, pass os.LookupEnv.
func ExampleLoadKeyring() {
	env := map[string]string{
		codec.EnvKeys: "k2:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=,k1:HxoZGBcWFRQTEhEQDw4NDAsKCQgHBgUEAwIBAB8eHRw=",
	}
	keys, ok, err := codec.LoadKeyring(func(name string) (string, bool) {
		v, ok := env[name]
		return v, ok
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(ok, keys.CurrentID(), keys.IDs())

	dc := codec.NewDataConverter(keys)
	p, err := dc.ToPayload("ada@example.com")
	if err != nil {
		log.Fatal(err)
	}
	var email string
	if err := dc.FromPayload(p, &email); err != nil {
		log.Fatal(err)
	}
	fmt.Println(string(p.Metadata["encoding"]), string(p.Metadata["encryption-key-id"]), email)
	// Output:
	// true k2 [k2 k1]
	// binary/encrypted k2 ada@example.com
}
