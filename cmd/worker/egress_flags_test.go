package main

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/sandfleet/sandfleet/internal/cmdline"
)

// A worker whose --egress-allow overlaps the sandboxes' own networks
// refuses to start, naming both: no rule reaches another sandbox.
func TestEgressAllowOverlappingSubnetsRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		bad  string // the rule named, "" for a start that goes on
	}{
		{[]string{"--egress-allow", "10.0.0.0/8"}, "10.0.0.0/8"},
		{[]string{"--egress-allow", "pypi.org,10.231.7.3:80"}, "10.231.7.3:80"},
		{[]string{"--egress-allow", "10.0.0.0/8", "--egress-subnets", "172.30.0.0/16"}, ""},
		{[]string{"--egress-allow", "10.230.0.0/16,mirror.internal"}, ""},
		{[]string{"--egress-allow", "192.168.0.0/16", "--egress-subnets", "192.168.100.0/24"}, "192.168.0.0/16"},
	} {
		o, err := parseFlags(tc.args)
		if err != nil {
			t.Fatalf("parseFlags(%q): %v", tc.args, err)
		}
		_, err = executorConfig(o)
		if tc.bad == "" {
			if err != nil {
				t.Errorf("%q: %v, want it accepted", tc.args, err)
			}
			continue
		}
		if !errors.Is(err, cmdline.ErrUsage) || !strings.Contains(err.Error(), "--egress-allow "+tc.bad) ||
			!strings.Contains(err.Error(), "--egress-subnets "+o.subnets.String()) {
			t.Errorf("%q: %v, want a usage error naming --egress-allow %s and --egress-subnets %s", tc.args, err, tc.bad, o.subnets)
		}
	}
	// The command itself stops there, before it connects to anything.
	err := Run(context.Background(), context.Background(), []string{"--nats", "nats://127.0.0.1:1", "--egress-allow", "10.0.0.0/8"}, io.Discard)
	if !errors.Is(err, cmdline.ErrUsage) || !strings.Contains(err.Error(), "10.231.0.0/16") {
		t.Errorf("Run: %v, want a usage error naming the subnets", err)
	}
}
