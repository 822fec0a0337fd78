//go:build tools

// Package images pins what Knative's networking test images need (the KIngress
// conformance suite's backends: knative.dev/networking/test/test_images/*), so
// scripts/cluster-bins builds them from this module at the versions knative/go.mod pins.
// No code of Lampyr's own lives here.
package images

import (
	_ "github.com/rs/dnscache"
	_ "knative.dev/networking/test"
)
