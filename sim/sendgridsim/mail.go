package sendgridsim

import (
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"mime"
	"net/http"
	"net/mail"
	"reflect"
	"strings"
	"unicode"
)

// Limits of the Mail Send API.
const (
	maxPersonalizations = 1000
	maxRecipients       = 1000
	maxCustomArgsBytes  = 10000
)

const helpBase = "http://sendgrid.com/docs/API_Reference/Web_API_v3/Mail/errors.html#message."

// apiError is one entry of the "errors" array SendGrid answers. Field and
// Help are JSON null when nil.
type apiError struct {
	Message string  `json:"message"`
	Field   *string `json:"field"`
	Help    *string `json:"help"`
}

func fieldError(field, message, help string) apiError {
	e := apiError{Message: message, Field: &field}
	if help != "" {
		h := helpBase + help
		e.Help = &h
	}
	return e
}

// writeErrors answers status with {"errors":[…]}.
func writeErrors(w http.ResponseWriter, status int, errs ...apiError) {
	if errs == nil {
		errs = []apiError{}
	}
	b, err := json.Marshal(struct {
		Errors []apiError `json:"errors"`
	}{errs})
	if err != nil { // cannot happen: apiError only holds strings
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// readBody reads a Mail Send body: JSON, at most MaxBodyBytes, optionally
// gzip-compressed (Content-Encoding: gzip, which sendgrid-go can send). A
// non-zero status is the error to answer.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, int, apiError) {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "application/json" {
		return nil, http.StatusUnsupportedMediaType, apiError{Message: "Content-Type should be application/json."}
	}
	tooLarge := apiError{Message: fmt.Sprintf("The request body is too large: the limit is %d bytes.", MaxBodyBytes)}
	var src io.Reader = http.MaxBytesReader(w, r.Body, MaxBodyBytes)
	switch enc := strings.ToLower(r.Header.Get("Content-Encoding")); enc {
	case "", "identity":
	case "gzip":
		zr, err := gzip.NewReader(src)
		if err != nil {
			return nil, http.StatusBadRequest, apiError{Message: "The request body is not valid gzip."}
		}
		defer zr.Close()
		src = zr
	default:
		return nil, http.StatusUnsupportedMediaType, apiError{Message: fmt.Sprintf("Content-Encoding %q is not supported.", enc)}
	}
	body, err := io.ReadAll(io.LimitReader(src, MaxBodyBytes+1))
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe) || len(body) > MaxBodyBytes:
		return nil, http.StatusRequestEntityTooLarge, tooLarge
	case err != nil:
		return nil, http.StatusBadRequest, apiError{Message: "The request body could not be read."}
	}
	return body, 0, apiError{}
}

// mailRequest is the part of a Mail Send body that the simulator checks.
// Other fields are accepted and ignored, as they are valid SendGrid fields.
type mailRequest struct {
	Personalizations []personalization          `json:"personalizations"`
	From             *address                   `json:"from"`
	ReplyTo          *address                   `json:"reply_to"`
	Subject          string                     `json:"subject"`
	Content          []contentBlock             `json:"content"`
	TemplateID       string                     `json:"template_id"`
	CustomArgs       map[string]json.RawMessage `json:"custom_args"`
	MailSettings     *struct {
		SandboxMode *struct {
			Enable bool `json:"enable"`
		} `json:"sandbox_mode"`
	} `json:"mail_settings"`
}

type personalization struct {
	To         []address                  `json:"to"`
	CC         []address                  `json:"cc"`
	BCC        []address                  `json:"bcc"`
	Subject    string                     `json:"subject"`
	CustomArgs map[string]json.RawMessage `json:"custom_args"`
}

type address struct {
	Email string `json:"email"`
	Name  string `json:"name"`
}

type contentBlock struct {
	Type  string `json:"type"`
	Value string `json:"value"`
}

// parsedMail is a valid mail, reduced to what the simulator records.
type parsedMail struct {
	to             []string
	from           string
	subject        string
	customArgs     map[string]string
	idempotencyKey string
	messageID      string
	sandbox        bool
}

// parseMail decodes and validates a Mail Send body. It returns every rule
// the body breaks, like SendGrid does.
func parseMail(body []byte) (*parsedMail, []apiError) {
	var req mailRequest
	if err := json.Unmarshal(body, &req); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return nil, []apiError{fieldError(te.Field,
				fmt.Sprintf("Invalid type. Expected: %s, given: %s.", jsonType(te.Type), te.Value), "")}
		}
		return nil, []apiError{{Message: "Bad Request"}}
	}

	var errs []apiError
	add := func(field, message, help string) {
		errs = append(errs, fieldError(field, message, help))
	}

	if len(req.Personalizations) == 0 {
		add("personalizations", "The personalizations field is required and must have at least one personalization.", "personalizations")
	}
	if len(req.Personalizations) > maxPersonalizations {
		add("personalizations", fmt.Sprintf("The personalizations field can have at most %d personalizations.", maxPersonalizations), "personalizations")
	}
	recipients := 0
	allHaveSubject := len(req.Personalizations) > 0
	for i, p := range req.Personalizations {
		prefix := fmt.Sprintf("personalizations.%d", i)
		if len(p.To) == 0 {
			add(prefix+".to", "The to array is required for all personalization objects, and must have at least one email object with a valid email address.", "personalizations.to")
		}
		seen := map[string]string{}
		for _, list := range []struct {
			name  string
			addrs []address
		}{{"to", p.To}, {"cc", p.CC}, {"bcc", p.BCC}} {
			for j, a := range list.addrs {
				field := fmt.Sprintf("%s.%s.%d.email", prefix, list.name, j)
				if !validEmail(a.Email) {
					add(field, "Does not contain a valid address.", "personalizations."+list.name)
					continue
				}
				lower := strings.ToLower(a.Email)
				if first, dup := seen[lower]; dup {
					add(prefix, fmt.Sprintf("Each email address in the personalization block should be unique between to, cc, and bcc. We found the first duplicate instance of [%s] in the %s field.", a.Email, first), "personalizations")
					continue
				}
				seen[lower] = field
			}
			recipients += len(list.addrs)
		}
		if p.Subject == "" {
			allHaveSubject = false
		}
		checkCustomArgs(prefix+".custom_args", p.CustomArgs, add)
	}
	if recipients > maxRecipients {
		add("personalizations", fmt.Sprintf("The total number of recipients must be at most %d.", maxRecipients), "personalizations")
	}

	switch {
	case req.From == nil || req.From.Email == "":
		add("from.email", `The from object must be provided for every email send. It is an object that requires the email parameter, but may also contain a name parameter.  e.g. {"email" : "example@example.com"}  or {"email" : "example@example.com", "name" : "Example Recipient"}.`, "from.email")
	case !validEmail(req.From.Email):
		add("from.email", "The from email does not contain a valid address.", "from.email")
	}
	if req.ReplyTo != nil && !validEmail(req.ReplyTo.Email) {
		add("reply_to.email", "The reply_to email does not contain a valid address.", "reply_to")
	}

	if req.Subject == "" && req.TemplateID == "" && !allHaveSubject {
		add("subject", "The subject is required. You can get around this requirement if you use a template with a subject defined or if every personalization has a subject defined.", "subject")
	}

	if req.TemplateID == "" && len(req.Content) == 0 {
		add("content", "Unless a valid template_id is provided, the content parameter is required. There must be at least one defined content block. We typically suggest both text/plain and text/html blocks are included, but only one block is required.", "content")
	}
	lastRank := 0
	for i, c := range req.Content {
		prefix := fmt.Sprintf("content.%d", i)
		switch {
		case c.Type == "":
			add(prefix+".type", "The content type is required and must be a string at least one character in length.", "content.type")
		case strings.ContainsAny(c.Type, ";\r\n"):
			add(prefix+".type", "The content type cannot contain ';', or CRLF characters.", "content.type")
		default:
			if rank := contentRank(c.Type); rank < lastRank {
				add(prefix+".type", "If present, text/plain must be first, followed by text/html, followed by any other content.", "content.type")
			} else {
				lastRank = rank
			}
		}
		if c.Value == "" {
			add(prefix+".value", "The content value must be a string at least one character in length.", "content.value")
		}
	}

	checkCustomArgs("custom_args", req.CustomArgs, add)
	size := customArgsSize(req.CustomArgs)
	for _, p := range req.Personalizations {
		size += customArgsSize(p.CustomArgs)
	}
	if size > maxCustomArgsBytes {
		add("custom_args", fmt.Sprintf("The total size of custom arguments must be at most %d bytes; it is %d.", maxCustomArgsBytes, size), "custom_args")
	}

	if len(errs) > 0 {
		return nil, errs
	}

	m := &parsedMail{
		from:       req.From.Email,
		subject:    req.Subject,
		customArgs: stringArgs(req.CustomArgs),
		sandbox:    req.MailSettings != nil && req.MailSettings.SandboxMode != nil && req.MailSettings.SandboxMode.Enable,
	}
	for _, p := range req.Personalizations {
		for _, a := range p.To {
			m.to = append(m.to, a.Email)
		}
	}
	first := req.Personalizations[0]
	if m.subject == "" {
		m.subject = first.Subject
	}
	maps.Copy(m.customArgs, stringArgs(first.CustomArgs))
	m.idempotencyKey = m.customArgs["idempotency_key"]
	m.messageID = m.customArgs["message_id"]
	return m, nil
}

// checkCustomArgs reports every custom argument whose value is not a string.
func checkCustomArgs(field string, args map[string]json.RawMessage, add func(field, message, help string)) {
	for k, v := range args {
		if t := rawType(v); t != "string" {
			add(field+"."+k, fmt.Sprintf("Invalid type. Expected: string, given: %s.", t), "custom_args")
		}
	}
}

func customArgsSize(args map[string]json.RawMessage) int {
	n := 0
	for k, v := range stringArgs(args) {
		n += len(k) + len(v)
	}
	return n
}

// stringArgs returns the string-valued custom arguments. It never returns
// nil.
func stringArgs(args map[string]json.RawMessage) map[string]string {
	out := make(map[string]string, len(args))
	for k, v := range args {
		var s string
		if json.Unmarshal(v, &s) == nil && rawType(v) == "string" {
			out[k] = s
		}
	}
	return out
}

// rawType names the JSON type of v.
func rawType(v json.RawMessage) string {
	s := strings.TrimSpace(string(v))
	if s == "" {
		return "null"
	}
	switch s[0] {
	case '"':
		return "string"
	case '{':
		return "object"
	case '[':
		return "array"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	default:
		return "number"
	}
}

// jsonType names the JSON type that decodes into t.
func jsonType(t reflect.Type) string {
	if t == nil {
		return "unknown"
	}
	switch t.Kind() {
	case reflect.Pointer:
		return jsonType(t.Elem())
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Slice, reflect.Array:
		if t == reflect.TypeFor[json.RawMessage]() {
			return "any"
		}
		return "array"
	case reflect.Struct, reflect.Map:
		return "object"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		return "number"
	default:
		return t.Kind().String()
	}
}

// contentRank orders content types as SendGrid requires: text/plain first,
// then text/html, then anything else.
func contentRank(t string) int {
	switch strings.ToLower(strings.TrimSpace(t)) {
	case "text/plain":
		return 0
	case "text/html":
		return 1
	default:
		return 2
	}
}

// validEmail reports whether s is a bare address ("a@example.com", no
// display name, no angle brackets, no comment) with a dotted domain.
func validEmail(s string) bool {
	if s == "" || len(s) > 320 || strings.ContainsFunc(s, unicode.IsControl) {
		return false
	}
	a, err := mail.ParseAddress(s)
	if err != nil || a.Name != "" || a.Address != s {
		return false
	}
	at := strings.LastIndexByte(s, '@')
	domain := s[at+1:]
	return at > 0 && strings.Contains(domain, ".") &&
		!strings.HasPrefix(domain, ".") && !strings.HasSuffix(domain, ".") && !strings.HasPrefix(domain, "[")
}
