package ctl

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nodeld/nodeld/internal/grammar"
)

func TestDecodeInstanceParams(t *testing.T) {
	tests := []struct {
		name   string
		method Method
		give   string
		want   InstanceParams
		ok     bool
	}{
		{"status list", MethodStatus, `null`, InstanceParams{}, true},
		{"status list absent body", MethodStatus, ``, InstanceParams{}, true},
		{"status list departed", MethodStatus, `{"include_departed":true}`, InstanceParams{IncludeDeparted: true}, true},
		{"status one", MethodStatus, `{"instance_id":"echo-1a2b-n-00"}`, InstanceParams{InstanceID: "echo-1a2b-n-00"}, true},
		{"stop with grace", MethodStop, `{"instance_id":"a","grace_ms":5000}`, InstanceParams{InstanceID: "a", GraceMS: 5000}, true},
		{"start needs id", MethodStart, `{}`, InstanceParams{}, false},
		{"logs needs id", MethodLogs, `null`, InstanceParams{}, false},
		{"unknown field", MethodStop, `{"instance_id":"a","force":true}`, InstanceParams{}, false},
		{"trailing data", MethodStop, `{"instance_id":"a"} {}`, InstanceParams{}, false},
		{"not an object", MethodStop, `["a"]`, InstanceParams{}, false},
		{"grace on start", MethodStart, `{"instance_id":"a","grace_ms":1}`, InstanceParams{}, false},
		{"negative grace", MethodStop, `{"instance_id":"a","grace_ms":-1}`, InstanceParams{}, false},
		{"departed with id", MethodStatus, `{"instance_id":"a","include_departed":true}`, InstanceParams{}, false},
		{"path in id", MethodUnload, `{"instance_id":"../etc"}`, InstanceParams{}, false},
		{"upper case id", MethodUnload, `{"instance_id":"Echo-1"}`, InstanceParams{}, false},
		{"long id", MethodUnload, `{"instance_id":"` + strings.Repeat("a", grammar.MaxInstanceIDLen+1) + `"}`, InstanceParams{}, false},
		{"place is not an instance verb", MethodPlace, `{}`, InstanceParams{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DecodeInstanceParams(tt.method, json.RawMessage(tt.give))
			if (err == nil) != tt.ok {
				t.Fatalf("err = %v, want ok=%v", err, tt.ok)
			}
			var r *Refusal
			if err != nil && (!errors.As(err, &r) || r.Code != CodeInvalidRequest) {
				t.Fatalf("error %v is not an invalid_request refusal", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Fatalf("params (-want +got):\n%s", diff)
			}
		})
	}
}

func TestStopGrace(t *testing.T) {
	for give, want := range map[int64]time.Duration{
		0: DefaultStopGrace, 1500: 1500 * time.Millisecond, 60000: MaxStopGrace, 600000: MaxStopGrace,
	} {
		if got := (InstanceParams{GraceMS: give}).Grace(); got != want {
			t.Errorf("Grace(%d) = %s, want %s", give, got, want)
		}
	}
}

func validPlace() PlaceParams {
	return PlaceParams{
		Package: "echo-llm", Version: "1.2.0", Variant: "amd64-native",
		Manifest: []byte(`{"id":"echo-llm"}`), ManifestSig: []byte(`{"signatures":[]}`),
		Start: true, Config: json.RawMessage(`{"role":"chat"}`),
	}
}

func TestDecodePlaceParams(t *testing.T) {
	tests := []struct {
		name string
		edit func(*PlaceParams)
		raw  string // used instead of the edited params when set
		ok   bool
	}{
		{"valid", nil, "", true},
		{"no config", func(p *PlaceParams) { p.Config = nil }, "", true},
		{"bad package", func(p *PlaceParams) { p.Package = "a/b" }, "", false},
		{"empty version", func(p *PlaceParams) { p.Version = "" }, "", false},
		{"variant starts with dash", func(p *PlaceParams) { p.Variant = "-native" }, "", false},
		{"no manifest", func(p *PlaceParams) { p.Manifest = nil }, "", false},
		{"manifest too large", func(p *PlaceParams) { p.Manifest = make([]byte, MaxManifestBytes+1) }, "", false},
		{"no signature", func(p *PlaceParams) { p.ManifestSig = nil }, "", false},
		{"signature too large", func(p *PlaceParams) { p.ManifestSig = make([]byte, MaxManifestSigBytes+1) }, "", false},
		{"config not an object", func(p *PlaceParams) { p.Config = json.RawMessage(`[1]`) }, "", false},
		{"config too large", func(p *PlaceParams) {
			p.Config = json.RawMessage(`{"a":"` + strings.Repeat("x", MaxInstanceConfigBytes) + `"}`)
		}, "", false},
		{"unknown field", nil, `{"package":"a","version":"1","variant":"v","manifest":"YQ==","manifest_sig":"YQ==","extra":1}`, false},
		{"manifest not base64", nil, `{"package":"a","version":"1","variant":"v","manifest":"!!","manifest_sig":"YQ=="}`, false},
		{"null body", nil, `null`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := validPlace()
			if tt.edit != nil {
				tt.edit(&p)
			}
			body := []byte(tt.raw)
			if tt.raw == "" {
				var err error
				if body, err = json.Marshal(p); err != nil {
					t.Fatal(err)
				}
			}
			got, err := DecodePlaceParams(body)
			if (err == nil) != tt.ok {
				t.Fatalf("err = %v, want ok=%v", err, tt.ok)
			}
			if tt.ok {
				if diff := cmp.Diff(p, got); diff != "" {
					t.Fatalf("params (-want +got):\n%s", diff)
				}
			}
		})
	}
}

func TestDecodeResult(t *testing.T) {
	var r PlaceResult
	if err := DecodeResult(json.RawMessage(`{"instance_id":"i","runtime":"process","variant":"v","package":"p","status":{"state":"running"},"node":"n-1"}`), &r); err != nil {
		t.Fatal(err)
	}
	if r.Status.State != "running" {
		t.Fatalf("got %+v", r)
	}
	if err := DecodeResult(json.RawMessage(`{"started":"i","extra":1}`), &StartResult{}); err == nil {
		t.Fatal("unknown field accepted")
	}
}
