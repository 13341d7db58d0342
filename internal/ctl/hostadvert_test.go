package ctl

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestHostMetadataRoundTrip(t *testing.T) {
	m := HostMetadata{Instances: 3, InFlight: 1, Enabled: true, Labels: map[string]string{"rack": "a", "gpu": "rtx4090"}}
	md := m.Metadata()
	want := map[string]string{
		"instances": "3", "in_flight": "1", "enabled": "true",
		"label.rack": "a", "label.gpu": "rtx4090",
	}
	if diff := cmp.Diff(want, md); diff != "" {
		t.Fatalf("metadata (-want +got):\n%s", diff)
	}
	got, err := ParseHostMetadata(md)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(m, got); diff != "" {
		t.Fatalf("parsed (-want +got):\n%s", diff)
	}
}

func TestParseHostMetadata(t *testing.T) {
	base := func(edit func(map[string]string)) map[string]string {
		md := map[string]string{"instances": "0", "in_flight": "0", "enabled": "false"}
		edit(md)
		return md
	}
	tests := []struct {
		name    string
		give    map[string]string
		want    HostMetadata
		wantErr bool
	}{
		{name: "minimal", give: base(func(map[string]string) {}), want: HostMetadata{}},
		{name: "unknown key ignored", give: base(func(md map[string]string) { md["gpus"] = "2" }), want: HostMetadata{}},
		{name: "empty label key ignored", give: base(func(md map[string]string) { md["label."] = "x" }), want: HostMetadata{}},
		{name: "no instances", give: base(func(md map[string]string) { delete(md, "instances") }), wantErr: true},
		{name: "negative in flight", give: base(func(md map[string]string) { md["in_flight"] = "-1" }), wantErr: true},
		{name: "leading zero", give: base(func(md map[string]string) { md["instances"] = "01" }), wantErr: true},
		{name: "plus sign", give: base(func(md map[string]string) { md["instances"] = "+1" }), wantErr: true},
		{name: "enabled 1", give: base(func(md map[string]string) { md["enabled"] = "1" }), wantErr: true},
		{name: "no enabled", give: base(func(md map[string]string) { delete(md, "enabled") }), wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseHostMetadata(tt.give)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
