// Copyright 2026 The Lampyr Authors
// SPDX-License-Identifier: Apache-2.0

// Package cli is what the three cert-manager commands share: the command line with
// cert-manager's log flags, logging set-up, and a fatal exit.
package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/pflag"
	logsapi "k8s.io/component-base/logs/api/v1"

	logf "github.com/cert-manager/cert-manager/pkg/logs"
)

// FlagSet is the command line's flag set, named as the program was run (so its usage
// names the binary).
func FlagSet() *pflag.FlagSet {
	return pflag.NewFlagSet(filepath.Base(os.Args[0]), pflag.ContinueOnError)
}

// Start adds cert-manager's log flags to fs, parses the command line (exit 0 after
// --help, 2 on a bad flag, pflag having said why) and applies the logging configuration.
func Start(fs *pflag.FlagSet, logging *logsapi.LoggingConfiguration) {
	logf.AddFlags(logging, fs)
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			os.Exit(0)
		}
		os.Exit(2)
	}
	logf.InitLogs()
	if err := logf.ValidateAndApply(logging); err != nil {
		Fatal(err)
	}
}

// Fatal prints err, flushes the logs and exits 1.
func Fatal(err error) {
	fmt.Fprintln(os.Stderr, "error:", err)
	logf.FlushLogs()
	os.Exit(1)
}
