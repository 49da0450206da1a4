//go:build tools

// Package tools pins the main packages that testbed/build.sh compiles.
package tools

import (
	_ "sigs.k8s.io/kwok/cmd/kwok"
)
