//go:build tools

// Package tools pins the main packages that testbed/build.sh compiles.
package tools

import (
	_ "github.com/coredns/coredns"
)
