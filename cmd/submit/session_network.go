package main

import (
	"encoding/json"
	"strings"

	"github.com/sandfleet/sandfleet/pkg/limits"
)

// parsePolicy reads session network's POLICY: none, a JSON
// limits.network value, or allow rules separated by commas.
func parsePolicy(s string) (*limits.Network, error) {
	s = strings.TrimSpace(s)
	if s == "none" {
		return nil, nil
	}
	if strings.HasPrefix(s, "{") || strings.HasPrefix(s, `"`) || s == "true" || s == "false" {
		var n limits.Network
		if err := json.Unmarshal([]byte(s), &n); err != nil {
			return nil, err
		}
		return &n, nil
	}
	rules, err := limits.ParseRules(s)
	if err != nil {
		return nil, err
	}
	return &limits.Network{Allow: rules}, nil
}
