package vocabulary

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// suffixes are the kinds of typed string constants whose Go names follow
// their values: Outcome, PaymentOutcome, RefundDecision, Stage, …
var suffixes = []string{"Outcome", "Decision", "Stage"}

// prefix returns the prefix the constants of type typ carry ("Payment" for
// PaymentOutcome, "Outcome" for Outcome), and false for other types.
func prefix(typ string) (string, bool) {
	for _, s := range suffixes {
		if strings.HasSuffix(typ, s) {
			if p := strings.TrimSuffix(typ, s); p != "" {
				return p, true
			}
			return typ, true
		}
	}
	return "", false
}

func camel(words []string) string {
	var b strings.Builder
	for _, w := range words {
		if w != "" {
			b.WriteString(strings.ToUpper(w[:1]) + w[1:])
		}
	}
	return b.String()
}

// wantNames returns the names a constant with prefix p and value v may
// have: p and the value in CamelCase, or without the value's first word
// when that word is the prefix ("payment_failed" is PaymentFailed).
func wantNames(p, v string) []string {
	words := strings.FieldsFunc(v, func(r rune) bool { return r == '_' || r == '-' || r == ' ' })
	out := []string{p + camel(words)}
	if len(words) > 1 && strings.EqualFold(words[0], p) {
		out = append(out, p+camel(words[1:]))
	}
	return out
}

// mismatch is a constant whose name does not follow its value.
type mismatch struct{ pos, name, value, want string }

// check returns the constants of f whose names do not follow their values.
func check(fset *token.FileSet, f *ast.File) []mismatch {
	var out []mismatch
	for _, d := range f.Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, spec := range gd.Specs {
			vs, ok := spec.(*ast.ValueSpec)
			if !ok {
				continue
			}
			for i, n := range vs.Names {
				if i >= len(vs.Values) {
					continue
				}
				lit, ok := vs.Values[i].(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					continue
				}
				v, err := strconv.Unquote(lit.Value)
				if err != nil {
					continue
				}
				var p string
				switch id, _ := vs.Type.(*ast.Ident); {
				case id != nil:
					if p, ok = prefix(id.Name); !ok {
						continue
					}
				case vs.Type == nil && strings.HasPrefix(n.Name, "ErrType"):
					p = "ErrType"
				default:
					continue
				}
				want := wantNames(p, v)
				found := false
				for _, w := range want {
					found = found || w == n.Name
				}
				if !found {
					out = append(out, mismatch{fset.Position(n.Pos()).String(), n.Name, v, strings.Join(want, " or ")})
				}
			}
		}
	}
	return out
}

// TestNamesFollowValues: across the product's packages, every outcome,
// decision and stage constant, and every ErrType constant, is named for its
// value. Values are stored in Postgres and in histories and never change;
// a name that says something else (PaymentDeclined for "payment_failed")
// is renamed instead.
func TestNamesFollowValues(t *testing.T) {
	fset := token.NewFileSet()
	checked := 0
	for _, top := range []string{"activities", "workflows", "internal", "starter", "worker"} {
		err := filepath.WalkDir(filepath.Join("../..", top), func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			checked++
			for _, m := range check(fset, f) {
				t.Errorf("%s: %s = %q: want %s", m.pos, m.name, m.value, m.want)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if checked == 0 {
		t.Fatal("no Go files found")
	}
}

// TestCheckFindsMismatch: the check refuses the names this test was
// written against, so TestNamesFollowValues can fail.
func TestCheckFindsMismatch(t *testing.T) {
	src := `package p
type PaymentOutcome string
type RefundOutcome string
const (
	PaymentFailed PaymentOutcome = "payment_failed"
	PaymentDeclined PaymentOutcome = "payment_failed"
	RefundRefused RefundOutcome = "refund_failed"
	ErrTypeUnexpectedState = "unexpected_state"
	ErrTypeFenced = "Fencing"
)`
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "p.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range check(fset, f) {
		got = append(got, m.name)
	}
	if strings.Join(got, " ") != "PaymentDeclined RefundRefused ErrTypeFenced" {
		t.Errorf("mismatches = %q", got)
	}
}
