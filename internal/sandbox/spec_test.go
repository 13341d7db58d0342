package sandbox

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestDecodeSpec(t *testing.T) {
	tests := []struct {
		name    string
		give    string
		want    Spec
		wantErr string
	}{
		{name: "ok", give: `{"path":"/bin/x","args":["x","-v"],"landlock":true,"read":["/usr"],"write":["/s"],"devices":["/dev/null"]}`,
			want: Spec{Path: "/bin/x", Args: []string{"x", "-v"}, Landlock: true, Read: []string{"/usr"}, Write: []string{"/s"}, Devices: []string{"/dev/null"}}},
		{name: "trailing newline", give: `{"path":"/x","args":["x"]}` + "\n", want: Spec{Path: "/x", Args: []string{"x"}}},
		{name: "unknown field", give: `{"path":"/x","args":["x"],"uid":0}`, wantErr: "unknown field"},
		{name: "trailing data", give: `{"path":"/x","args":["x"]}{}`, wantErr: "data after"},
		{name: "relative path", give: `{"path":"x","args":["x"]}`, wantErr: "absolute clean"},
		{name: "unclean read", give: `{"path":"/x","args":["x"],"read":["/a/../etc"]}`, wantErr: "read[0]"},
		{name: "no args", give: `{"path":"/x","args":[]}`, wantErr: "args"},
		{name: "nul", give: `{"path":"/x","args":["a\u0000b"]}`, wantErr: "NUL"},
		{name: "too big", give: `{"path":"/x","args":["` + strings.Repeat("a", MaxSpecBytes) + `"]}`, wantErr: "more than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DecodeSpec(strings.NewReader(tt.give))
			if tt.wantErr != "" {
				if err == nil || !errors.Is(err, ErrSpec) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("DecodeSpec error = %v, want ErrSpec with %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("DecodeSpec (-want +got):\n%s", diff)
			}
		})
	}
}

// FuzzDecodeSpec: any bytes on the launcher's fd 3 decode to a valid spec
// or an ErrSpec, never a panic.
func FuzzDecodeSpec(f *testing.F) {
	f.Add([]byte(`{"path":"/bin/x","args":["x"],"landlock":true,"read":["/usr"],"write":["/s"]}`))
	f.Add([]byte(`{"path":"/x","args":["x"]} {}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := DecodeSpec(strings.NewReader(string(data)))
		if err != nil {
			if !errors.Is(err, ErrSpec) {
				t.Fatalf("error %v is not ErrSpec", err)
			}
			return
		}
		if err := s.validate(); err != nil {
			t.Fatalf("decoded spec does not validate: %v", err)
		}
	})
}
