//go:build tools

// Package tools pins the main packages that testbed/build.sh compiles.
package tools

import (
	_ "volcano.sh/volcano/cmd/controller-manager"
	_ "volcano.sh/volcano/cmd/scheduler"
)
