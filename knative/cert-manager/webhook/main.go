// Copyright 2026 The Lampyr Authors
// SPDX-License-Identifier: Apache-2.0

// Command webhook is a minimal cert-manager admission/conversion webhook
// composed from the cert-manager v1.14.4 library packages.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
	"time"

	logsapi "k8s.io/component-base/logs/api/v1"

	"github.com/cert-manager/cert-manager/cmd/lampyr/internal/cli"
	config "github.com/cert-manager/cert-manager/internal/apis/config/webhook"
	cmwebhook "github.com/cert-manager/cert-manager/internal/webhook"
	_ "github.com/cert-manager/cert-manager/internal/webhook/feature"
	logf "github.com/cert-manager/cert-manager/pkg/logs"
	utilfeature "github.com/cert-manager/cert-manager/pkg/util/feature"
)

func main() {
	var cfg config.WebhookConfiguration
	cfg.Logging = *logsapi.NewLoggingConfiguration()
	var featureGateStr string

	fs := cli.FlagSet()
	fs.StringVar(&cfg.APIServerHost, "master", "", "Kubernetes API server address (overrides kubeconfig)")
	fs.StringVar(&cfg.KubeConfig, "kubeconfig", "", "Path to a kubeconfig; in-cluster config if empty")
	fs.Int32Var(&cfg.SecurePort, "secure-port", 6443, "HTTPS port for admission/conversion requests")
	fs.Int32Var(&cfg.HealthzPort, "healthz-port", 6080, "HTTP port for /healthz and /livez")
	fs.StringVar(&cfg.TLSConfig.Filesystem.CertFile, "tls-cert-file", "", "Serving certificate file")
	fs.StringVar(&cfg.TLSConfig.Filesystem.KeyFile, "tls-private-key-file", "", "Serving private key file")
	fs.StringSliceVar(&cfg.TLSConfig.CipherSuites, "tls-cipher-suites", nil, "Allowed TLS cipher suites")
	fs.StringVar(&cfg.TLSConfig.MinTLSVersion, "tls-min-version", "", "Minimum TLS version")
	fs.StringVar(&cfg.TLSConfig.Dynamic.SecretNamespace, "dynamic-serving-ca-secret-namespace", "", "Namespace of the self-managed serving CA Secret")
	fs.StringVar(&cfg.TLSConfig.Dynamic.SecretName, "dynamic-serving-ca-secret-name", "", "Name of the self-managed serving CA Secret")
	fs.StringSliceVar(&cfg.TLSConfig.Dynamic.DNSNames, "dynamic-serving-dns-names", nil, "DNS names of the serving certificate")
	fs.DurationVar(&cfg.TLSConfig.Dynamic.LeafDuration, "dynamic-serving-leaf-duration", 7*24*time.Hour, "Serving certificate lifetime")
	fs.BoolVar(&cfg.EnablePprof, "enable-profiling", false, "Enable pprof")
	fs.StringVar(&cfg.PprofAddress, "profiler-address", "localhost:6060", "pprof address")
	fs.StringVar(&featureGateStr, "feature-gates", "", "Feature gates, e.g. Foo=true,Bar=false")
	cli.Start(fs, &cfg.Logging)
	if featureGateStr != "" {
		if err := utilfeature.DefaultMutableFeatureGate.Set(featureGateStr); err != nil {
			cli.Fatal(err)
		}
	}

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	log := logf.Log.WithName("lampyr-webhook")

	srv, err := cmwebhook.NewCertManagerWebhookServer(log, cfg)
	if err != nil {
		cli.Fatal(err)
	}
	if err := srv.Run(logf.NewContext(ctx, log)); err != nil {
		cli.Fatal(err)
	}
	logf.FlushLogs()
}
