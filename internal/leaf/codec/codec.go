package codec

import (
	"crypto/rand"
	"fmt"
	"io"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/protobuf/proto"
)

// Metadata of an encrypted payload.
const (
	// EncodingEncrypted is the "encoding" metadata value of a payload this
	// codec encrypted.
	EncodingEncrypted = "binary/encrypted"
	// MetadataKeyID is the metadata key naming the key that encrypted a
	// payload.
	MetadataKeyID = "encryption-key-id"
)

// nonceSize is GCM's standard nonce length. Random nonces of this size stay
// safe for well over 2^32 payloads per key; rotate keys long before that.
const nonceSize = 12

// Codec is a converter.PayloadCodec that encrypts every payload with
// AES-256-GCM under the keyring's current key and decrypts with whichever
// key the payload names.
//
// An encrypted payload's data is nonce || ciphertext || tag, where the
// plaintext is the original payload (metadata and data) in protobuf wire
// form, and the key ID is authenticated as additional data.
//
// Only the key ID is bound to the ciphertext: the SDK's PayloadCodec
// interface hands Encode and Decode the payloads and nothing else (no
// namespace, workflow ID or run), so a payload copied from one workflow's
// history into another's decrypts there too.
type Codec struct {
	keys    *Keyring
	rand    io.Reader
	require bool
}

var _ converter.PayloadCodec = (*Codec)(nil)

// EnvRequire names the boolean variable (read by internal/config) that
// turns RequireEncryption on; it needs EnvKeys or EnvKeyFile.
const EnvRequire = "EFFECTIVELY_CODEC_REQUIRE"

// Option configures a Codec.
type Option func(*Codec)

// RequireEncryption makes Decode refuse, when on, every payload this codec
// did not encrypt, instead of passing it through: a plaintext payload
// (written before the codec was installed, or by a client without keys)
// fails the workflow task or activity that reads it. Off by default.
func RequireEncryption(on bool) Option {
	return func(c *Codec) { c.require = on }
}

// NewCodec returns a codec that uses keys. It panics if keys is nil: a
// keyring comes from NewKeyring or LoadKeyring, which never return a nil
// keyring with a nil error.
func NewCodec(keys *Keyring, opts ...Option) *Codec {
	if keys == nil {
		panic("codec: NewCodec needs a keyring")
	}
	c := &Codec{keys: keys, rand: rand.Reader}
	for _, o := range opts {
		o(c)
	}
	return c
}

// NewDataConverter returns the SDK's default data converter with payloads
// encrypted by a Codec using keys and opts. Install it on every client that
// starts, signals, queries or runs workflows, and on the worker's client.
func NewDataConverter(keys *Keyring, opts ...Option) converter.DataConverter {
	return converter.NewCodecDataConverter(converter.GetDefaultDataConverter(), NewCodec(keys, opts...))
}

// NewFailureConverter returns a failure converter that moves each failure's
// message and stack trace into an attribute payload encoded by dc, so error
// text (which may quote an email address) is encrypted like any other
// payload. Set it as client.Options.FailureConverter next to dc.
func NewFailureConverter(dc converter.DataConverter) converter.FailureConverter {
	return temporal.NewDefaultFailureConverter(temporal.DefaultFailureConverterOptions{
		DataConverter:          dc,
		EncodeCommonAttributes: true,
	})
}

// Encode encrypts every payload under the current key.
func (c *Codec) Encode(payloads []*commonpb.Payload) ([]*commonpb.Payload, error) {
	id := c.keys.current
	aead := c.keys.aeads[id]
	out := make([]*commonpb.Payload, len(payloads))
	for i, p := range payloads {
		plain, err := proto.Marshal(p)
		if err != nil {
			return nil, fmt.Errorf("codec: encrypt payload %d: marshal: %w", i, err)
		}
		data := make([]byte, nonceSize, nonceSize+len(plain)+aead.Overhead())
		if _, err := io.ReadFull(c.rand, data); err != nil {
			return nil, fmt.Errorf("codec: encrypt payload %d: read nonce: %w", i, err)
		}
		data = aead.Seal(data, data[:nonceSize], plain, []byte(id))
		out[i] = &commonpb.Payload{
			Metadata: map[string][]byte{
				converter.MetadataEncoding: []byte(EncodingEncrypted),
				MetadataKeyID:              []byte(id),
			},
			Data: data,
		}
	}
	return out, nil
}

// Decode decrypts every encrypted payload with the key it names. Payloads
// that are not encrypted (written before the codec was installed) pass
// through unchanged, unless the codec requires encryption: then they are an
// error naming the payload's encoding, never its contents. A payload that
// was altered, or names a key this keyring does not hold, is an error.
func (c *Codec) Decode(payloads []*commonpb.Payload) ([]*commonpb.Payload, error) {
	out := make([]*commonpb.Payload, len(payloads))
	for i, p := range payloads {
		if enc := string(p.GetMetadata()[converter.MetadataEncoding]); enc != EncodingEncrypted {
			if c.require {
				return nil, fmt.Errorf("codec: payload %d is not encrypted (encoding %q) and %s is on: refusing it", i, clip(enc), EnvRequire)
			}
			out[i] = p
			continue
		}
		plain, err := c.open(p)
		if err != nil {
			return nil, fmt.Errorf("codec: decrypt payload %d: %w", i, err)
		}
		out[i] = plain
	}
	return out, nil
}

func (c *Codec) open(p *commonpb.Payload) (*commonpb.Payload, error) {
	raw, ok := p.GetMetadata()[MetadataKeyID]
	if !ok {
		return nil, fmt.Errorf("no %s metadata", MetadataKeyID)
	}
	id := string(raw)
	aead, ok := c.keys.aeads[id]
	if !ok {
		return nil, fmt.Errorf("unknown key id %q (this keyring holds %q)", clip(id), c.keys.ids)
	}
	data := p.GetData()
	if len(data) < nonceSize+aead.Overhead() {
		return nil, fmt.Errorf("key %q: %d bytes is too short to be a sealed payload", id, len(data))
	}
	plain, err := aead.Open(nil, data[:nonceSize], data[nonceSize:], []byte(id))
	if err != nil {
		return nil, fmt.Errorf("key %q: authentication failed: the payload was altered or sealed under another key with this id", id)
	}
	var orig commonpb.Payload
	if err := proto.Unmarshal(plain, &orig); err != nil {
		return nil, fmt.Errorf("key %q: unmarshal decrypted payload: %w", id, err)
	}
	return &orig, nil
}

// clip shortens a metadata value quoted in an error: it comes from the
// payload, so it may be anything, of any length.
func clip(s string) string {
	if len(s) > 2*maxIDLen {
		return s[:2*maxIDLen] + "…"
	}
	return s
}
