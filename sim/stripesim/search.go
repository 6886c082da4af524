package stripesim

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// searchParams are the parameters accepted by the search endpoint.
var searchParams = map[string]bool{"query": true, "limit": true, "page": true}

// clause is one term of a search query, such as status:'succeeded' or
// amount>=100.
type clause struct {
	field    string // status, currency, customer, amount, created or metadata
	key      string // the metadata key, for field metadata
	op       string // ":", ">", "<", ">=" or "<="
	value    string
	numValue int64
}

// searchResult is Stripe's search_result object.
type searchResult struct {
	Object   string           `json:"object"`
	Data     []*paymentIntent `json:"data"`
	HasMore  bool             `json:"has_more"`
	NextPage *string          `json:"next_page"`
	URL      string           `json:"url"`
}

func (s *Server) search(form url.Values) (operation, *apiError) {
	if e := checkKnown(form, searchParams, readPrefixes); e != nil {
		return nil, e
	}
	if !form.Has("query") {
		return nil, missingParam("query")
	}
	clauses, err := parseQuery(form.Get("query"))
	if err != nil {
		return nil, invalidRequest("query", "", "Invalid search query: %v", err)
	}
	limit := int64(10)
	if form.Has("limit") {
		raw := form.Get("limit")
		n, err := strconv.ParseInt(raw, 10, 64)
		if err != nil {
			return nil, invalidRequest("limit", codeParameterInvalidInteger, "Invalid integer: %s", raw)
		}
		if n < 1 || n > 100 {
			return nil, invalidRequest("limit", "", "This value must be between 1 and 100.")
		}
		limit = n
	}
	offset := 0
	if page := form.Get("page"); page != "" {
		n, err := strconv.Atoi(strings.TrimPrefix(page, "page_"))
		if err != nil || n < 0 || !strings.HasPrefix(page, "page_") {
			return nil, invalidRequest("page", "", "Invalid page: %s", page)
		}
		offset = n
	}

	return func(string) response {
		var matched []*paymentIntent
		// Newest first, as Stripe lists.
		for i := len(s.order) - 1; i >= 0; i-- {
			pi := s.order[i]
			if !s.searchableLocked(pi) {
				continue
			}
			s.advanceLocked(pi)
			if matchesAll(pi, clauses) {
				matched = append(matched, pi)
			}
		}
		res := searchResult{
			Object: "search_result",
			Data:   []*paymentIntent{},
			URL:    "/v1/payment_intents/search",
		}
		if offset < len(matched) {
			end := min(offset+int(limit), len(matched))
			res.Data = matched[offset:end]
			if end < len(matched) {
				res.HasMore = true
				next := fmt.Sprintf("page_%d", end)
				res.NextPage = &next
			}
		}
		return jsonResponse(http.StatusOK, res)
	}, nil
}

func matchesAll(pi *paymentIntent, clauses []clause) bool {
	for _, c := range clauses {
		if !c.matches(pi) {
			return false
		}
	}
	return true
}

func (c clause) matches(pi *paymentIntent) bool {
	switch c.field {
	case "status":
		return pi.Status == c.value
	case "currency":
		return pi.Currency == strings.ToLower(c.value)
	case "customer":
		return pi.Customer != nil && *pi.Customer == c.value
	case "metadata":
		v, ok := pi.Metadata[c.key]
		return ok && v == c.value
	case "amount":
		return compare(pi.Amount, c.op, c.numValue)
	case "created":
		return compare(pi.Created, c.op, c.numValue)
	}
	return false
}

func compare(have int64, op string, want int64) bool {
	switch op {
	case ":":
		return have == want
	case ">":
		return have > want
	case "<":
		return have < want
	case ">=":
		return have >= want
	case "<=":
		return have <= want
	}
	return false
}

// parseQuery parses the subset of Stripe's search query language the
// simulator supports: clauses joined by AND, each a field, an operator and a
// value, such as
//
//	metadata['message_id']:'evt_1' AND status:'succeeded' AND amount>=100
//
// String fields (status, currency, customer, metadata['key']) take ":" and a
// quoted value; numeric fields (amount, created) take ":", ">", "<", ">=" or
// "<=" and an integer.
func parseQuery(q string) ([]clause, error) {
	p := &queryParser{s: q}
	var clauses []clause
	for {
		p.skipSpace()
		c, err := p.clause()
		if err != nil {
			return nil, err
		}
		clauses = append(clauses, c)
		p.skipSpace()
		if p.done() {
			return clauses, nil
		}
		if !p.consumeWord("AND") {
			if p.consumeWord("OR") {
				return nil, errors.New("OR is not supported by the simulator")
			}
			return nil, fmt.Errorf("expected AND at offset %d", p.i)
		}
	}
}

type queryParser struct {
	s string
	i int
}

func (p *queryParser) done() bool { return p.i >= len(p.s) }

func (p *queryParser) skipSpace() {
	for !p.done() && p.s[p.i] == ' ' {
		p.i++
	}
}

// consumeWord consumes w if it comes next, followed by a space.
func (p *queryParser) consumeWord(w string) bool {
	if strings.HasPrefix(p.s[p.i:], w+" ") {
		p.i += len(w) + 1
		return true
	}
	return false
}

func (p *queryParser) clause() (clause, error) {
	var c clause
	start := p.i
	for !p.done() && (isLetter(p.s[p.i]) || p.s[p.i] == '_') {
		p.i++
	}
	c.field = p.s[start:p.i]
	switch c.field {
	case "":
		return c, fmt.Errorf("expected a field name at offset %d", start)
	case "metadata":
		if p.done() || p.s[p.i] != '[' {
			return c, errors.New("metadata must be followed by ['key']")
		}
		p.i++
		key, err := p.quoted()
		if err != nil {
			return c, err
		}
		if p.done() || p.s[p.i] != ']' {
			return c, errors.New("unterminated metadata key")
		}
		p.i++
		c.key = key
	case "status", "currency", "customer", "amount", "created":
	default:
		return c, fmt.Errorf("unsupported field %q", c.field)
	}

	for _, op := range []string{">=", "<=", ":", ">", "<"} {
		if strings.HasPrefix(p.s[p.i:], op) {
			c.op = op
			p.i += len(op)
			break
		}
	}
	if c.op == "" {
		return c, fmt.Errorf("expected an operator after %s", c.field)
	}

	if c.field == "amount" || c.field == "created" {
		start := p.i
		for !p.done() && (p.s[p.i] >= '0' && p.s[p.i] <= '9' || p.s[p.i] == '-') {
			p.i++
		}
		n, err := strconv.ParseInt(p.s[start:p.i], 10, 64)
		if err != nil {
			return c, fmt.Errorf("%s needs an integer value", c.field)
		}
		c.numValue = n
		return c, nil
	}
	if c.op != ":" {
		return c, fmt.Errorf("%s supports only the : operator", c.field)
	}
	v, err := p.quoted()
	if err != nil {
		return c, err
	}
	c.value = v
	return c, nil
}

// quoted reads a single- or double-quoted string with backslash escapes.
func (p *queryParser) quoted() (string, error) {
	if p.done() || (p.s[p.i] != '\'' && p.s[p.i] != '"') {
		return "", fmt.Errorf("expected a quoted value at offset %d", p.i)
	}
	quote := p.s[p.i]
	p.i++
	var b strings.Builder
	for !p.done() {
		ch := p.s[p.i]
		p.i++
		switch {
		case ch == '\\' && !p.done():
			b.WriteByte(p.s[p.i])
			p.i++
		case ch == quote:
			return b.String(), nil
		default:
			b.WriteByte(ch)
		}
	}
	return "", errors.New("unterminated quoted value")
}

func isLetter(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}
