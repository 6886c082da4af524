package codec

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/proto"
)

type order struct {
	Email  string `json:"customer_email"`
	Amount int64  `json:"amount"`
}

func mustKeyring(t testing.TB, keys ...Key) *Keyring {
	t.Helper()
	kr, err := NewKeyring(keys...)
	if err != nil {
		t.Fatal(err)
	}
	return kr
}

// plainPayloads are payloads as the SDK's default converter writes them.
func plainPayloads(t testing.TB) []*commonpb.Payload {
	t.Helper()
	ps, err := converter.GetDefaultDataConverter().ToPayloads(
		order{Email: "ada@example.com", Amount: 1999}, "ada@example.com", nil, []byte{0, 1, 2}, 42)
	if err != nil {
		t.Fatal(err)
	}
	return ps.GetPayloads()
}

func checkEncrypted(t *testing.T, p *commonpb.Payload, keyID string) {
	t.Helper()
	if got := string(p.GetMetadata()[converter.MetadataEncoding]); got != EncodingEncrypted {
		t.Errorf("encoding = %q, want %q", got, EncodingEncrypted)
	}
	if got := string(p.GetMetadata()[MetadataKeyID]); got != keyID {
		t.Errorf("key id = %q, want %q", got, keyID)
	}
	if len(p.GetMetadata()) != 2 {
		t.Errorf("metadata = %v, want only encoding and key id", p.GetMetadata())
	}
	raw, err := proto.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"ada@example.com", `"amount"`, "json/plain"} {
		if bytes.Contains(raw, []byte(s)) {
			t.Errorf("encrypted payload contains %q in plaintext", s)
		}
	}
}

func TestRoundTrip(t *testing.T) {
	c := NewCodec(mustKeyring(t, testKey("k1", 1)))
	plain := plainPayloads(t)
	enc, err := c.Encode(plain)
	if err != nil {
		t.Fatal(err)
	}
	if len(enc) != len(plain) {
		t.Fatalf("encoded %d payloads, want %d", len(enc), len(plain))
	}
	for _, p := range enc {
		checkEncrypted(t, p, "k1")
	}
	dec, err := c.Decode(enc)
	if err != nil {
		t.Fatal(err)
	}
	for i := range plain {
		if !proto.Equal(dec[i], plain[i]) {
			t.Errorf("payload %d: decoded %v, want %v", i, dec[i], plain[i])
		}
	}

	// A fresh nonce per payload: the same value never encrypts the same way.
	again, err := c.Encode(plain[:1])
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(again[0].GetData(), enc[0].GetData()) || bytes.Equal(again[0].GetData()[:nonceSize], enc[0].GetData()[:nonceSize]) {
		t.Error("encrypting the same payload twice gave the same nonce or ciphertext")
	}
}

func TestDataConverterRoundTrip(t *testing.T) {
	dc := NewDataConverter(mustKeyring(t, testKey("k1", 1)))
	in := order{Email: "ada@example.com", Amount: 1999}
	p, err := dc.ToPayload(in)
	if err != nil {
		t.Fatal(err)
	}
	checkEncrypted(t, p, "k1")
	var out order
	if err := dc.FromPayload(p, &out); err != nil {
		t.Fatal(err)
	}
	if out != in {
		t.Errorf("round trip = %+v, want %+v", out, in)
	}
	// The default converter cannot read it: nothing but the codec can.
	if err := converter.GetDefaultDataConverter().FromPayload(p, &out); err == nil {
		t.Error("the default converter decoded an encrypted payload")
	}
}

func TestTamperDetected(t *testing.T) {
	c := NewCodec(mustKeyring(t, testKey("k1", 1), testKey("k0", 0)))
	enc, err := c.Encode(plainPayloads(t)[:1])
	if err != nil {
		t.Fatal(err)
	}
	orig := enc[0]
	n := len(orig.GetData())
	flip := func(i int) func(*commonpb.Payload) {
		return func(p *commonpb.Payload) { p.Data[i] ^= 0x01 }
	}
	cases := []struct {
		name   string
		mutate func(*commonpb.Payload)
		want   string
	}{
		{"nonce byte", flip(0), "authentication failed"},
		{"ciphertext byte", flip(nonceSize + 3), "authentication failed"},
		{"tag byte", flip(n - 1), "authentication failed"},
		{"truncated", func(p *commonpb.Payload) { p.Data = p.Data[:nonceSize+8] }, "too short"},
		{"appended byte", func(p *commonpb.Payload) { p.Data = append(p.Data, 0) }, "authentication failed"},
		{"key id swapped to another known key", func(p *commonpb.Payload) { p.Metadata[MetadataKeyID] = []byte("k0") }, "authentication failed"},
		{"key id removed", func(p *commonpb.Payload) { delete(p.Metadata, MetadataKeyID) }, MetadataKeyID},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, ok := proto.Clone(orig).(*commonpb.Payload)
			if !ok {
				t.Fatal("clone is not a payload")
			}
			tc.mutate(p)
			dec, err := c.Decode([]*commonpb.Payload{p})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Decode = %v, %v; want an error mentioning %q", dec, err, tc.want)
			}
		})
	}
	// The untouched payload still decodes: the cases above changed copies.
	if _, err := c.Decode([]*commonpb.Payload{orig}); err != nil {
		t.Fatalf("untouched payload: %v", err)
	}
}

func TestKeyRotation(t *testing.T) {
	k1, k2 := testKey("k1", 1), testKey("k2", 2)
	before := NewCodec(mustKeyring(t, k1))
	old, err := before.Encode(plainPayloads(t))
	if err != nil {
		t.Fatal(err)
	}

	// Rotate: k2 becomes current, k1 stays for decryption.
	after := NewCodec(mustKeyring(t, k2, k1))
	fresh, err := after.Encode(plainPayloads(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range fresh {
		checkEncrypted(t, p, "k2")
	}
	for name, batch := range map[string][]*commonpb.Payload{"k1 payloads": old, "k2 payloads": fresh} {
		dec, err := after.Decode(batch)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for i, want := range plainPayloads(t) {
			if !proto.Equal(dec[i], want) {
				t.Errorf("%s: payload %d = %v, want %v", name, i, dec[i], want)
			}
		}
	}
	// The old keyring cannot read what the new key wrote.
	if _, err := before.Decode(fresh); err == nil || !strings.Contains(err.Error(), `unknown key id "k2"`) {
		t.Errorf("old keyring decoding k2 payloads: err = %v", err)
	}
}

func TestUnknownKeyID(t *testing.T) {
	enc, err := NewCodec(mustKeyring(t, testKey("k9", 9))).Encode(plainPayloads(t)[:1])
	if err != nil {
		t.Fatal(err)
	}
	_, err = NewCodec(mustKeyring(t, testKey("k2", 2), testKey("k1", 1))).Decode(enc)
	if err == nil {
		t.Fatal("decoded a payload sealed under a key the keyring does not hold")
	}
	for _, want := range []string{"decrypt payload 0", `unknown key id "k9"`, `"k2"`, `"k1"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

func TestPlaintextPassesThroughDecode(t *testing.T) {
	c := NewCodec(mustKeyring(t, testKey("k1", 1)))
	plain := plainPayloads(t)
	enc, err := c.Encode(plain[:1])
	if err != nil {
		t.Fatal(err)
	}
	// A history written before the codec, then one payload written after.
	mixed := append(append([]*commonpb.Payload{}, plain...), enc[0], &commonpb.Payload{})
	dec, err := c.Decode(mixed)
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range plain {
		if dec[i] != p {
			t.Errorf("plaintext payload %d was not passed through unchanged", i)
		}
	}
	if !proto.Equal(dec[len(plain)], plain[0]) {
		t.Errorf("encrypted payload in a mixed batch = %v, want %v", dec[len(plain)], plain[0])
	}
}

func TestFailureConverterEncryptsErrorText(t *testing.T) {
	dc := NewDataConverter(mustKeyring(t, testKey("k1", 1)))
	fc := NewFailureConverter(dc)
	f := fc.ErrorToFailure(errors.New(`address "ada@example.com" is not valid`))
	raw, err := proto.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(raw, []byte("ada@example.com")) {
		t.Errorf("failure holds the email in plaintext: %v", f)
	}
	checkEncrypted(t, f.GetEncodedAttributes(), "k1")
	if got := fc.FailureToError(f).Error(); !strings.Contains(got, "ada@example.com") {
		t.Errorf("decoded failure = %q, want the original message", got)
	}
}

func TestRequireEncryptionRefusesPlaintext(t *testing.T) {
	keys := mustKeyring(t, testKey("k1", 1))
	strict := NewCodec(keys, RequireEncryption(true))
	plain := plainPayloads(t)

	// What this codec encrypted still round-trips.
	enc, err := strict.Encode(plain)
	if err != nil {
		t.Fatal(err)
	}
	dec, err := strict.Decode(enc)
	if err != nil {
		t.Fatalf("encrypted payloads: %v", err)
	}
	for i := range plain {
		if !proto.Equal(dec[i], plain[i]) {
			t.Errorf("payload %d: decoded %v, want %v", i, dec[i], plain[i])
		}
	}

	// One plaintext payload in a batch refuses the batch, naming its
	// position and encoding, never its contents.
	long := &commonpb.Payload{Metadata: map[string][]byte{converter.MetadataEncoding: []byte(strings.Repeat("x", 500))}}
	cases := map[string]struct {
		p    *commonpb.Payload
		want string
	}{
		"json":        {plain[0], `payload 1 is not encrypted (encoding "json/plain")`},
		"binary":      {plain[3], `payload 1 is not encrypted (encoding "binary/plain")`},
		"no encoding": {&commonpb.Payload{Data: []byte("ada@example.com")}, `payload 1 is not encrypted (encoding "")`},
		"long":        {long, `(encoding "` + strings.Repeat("x", 2*maxIDLen) + `…")`},
	}
	for name, tc := range cases {
		_, err := strict.Decode([]*commonpb.Payload{enc[0], tc.p})
		if err == nil {
			t.Errorf("%s: a plaintext payload was accepted", name)
			continue
		}
		msg := err.Error()
		for _, want := range []string{tc.want, EnvRequire} {
			if !strings.Contains(msg, want) {
				t.Errorf("%s: error %q does not mention %q", name, msg, want)
			}
		}
		if strings.Contains(msg, "ada@example.com") || strings.Contains(msg, strings.Repeat("x", 2*maxIDLen+1)) {
			t.Errorf("%s: error quotes the payload: %q", name, msg)
		}
	}

	// Off (the default, and RequireEncryption(false)) passes plaintext through.
	for _, c := range []*Codec{NewCodec(keys), NewCodec(keys, RequireEncryption(false))} {
		if dec, err := c.Decode(plain[:1]); err != nil || dec[0] != plain[0] {
			t.Errorf("require off: Decode = %v, %v; want the payload passed through", dec, err)
		}
	}
}

// TestDataConverterRequiringEncryption: a workflow or activity whose client
// requires encryption fails to read a plaintext argument, as the SDK reads
// it, through the data converter.
func TestDataConverterRequiringEncryption(t *testing.T) {
	keys := mustKeyring(t, testKey("k1", 1))
	in := order{Email: "ada@example.com", Amount: 1999}
	plain, err := converter.GetDefaultDataConverter().ToPayloads(in)
	if err != nil {
		t.Fatal(err)
	}
	var out order
	err = NewDataConverter(keys, RequireEncryption(true)).FromPayloads(plain, &out)
	if err == nil || !strings.Contains(err.Error(), `not encrypted (encoding "json/plain")`) {
		t.Fatalf("FromPayloads of plaintext = %v, want a refusal naming the encoding", err)
	}
	if out != (order{}) {
		t.Errorf("the refused payload was decoded into %+v", out)
	}
	if err := NewDataConverter(keys).FromPayloads(plain, &out); err != nil || out != in {
		t.Errorf("require off: %+v, %v; want %+v", out, err, in)
	}

	dc := NewDataConverter(keys, RequireEncryption(true))
	enc, err := dc.ToPayloads(in)
	if err != nil {
		t.Fatal(err)
	}
	out = order{}
	if err := dc.FromPayloads(enc, &out); err != nil || out != in {
		t.Errorf("encrypted round trip with require on = %+v, %v; want %+v", out, err, in)
	}
}
