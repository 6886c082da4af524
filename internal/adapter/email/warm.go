package email

// Warm encodes a mail as Send does, so that a process's first receipt does
// not pay for building encoding/json's caches of sendgrid-go's types.
// Nothing is sent. The worker calls it before it answers /readyz.
func (c *Client) Warm() error {
	_, err := c.body(Mail{IdempotencyKey: "email:warm", MessageID: "warm", To: "warm@example.com", Subject: "warm", Text: "warm", HTML: "<p>warm</p>"})
	return err
}
