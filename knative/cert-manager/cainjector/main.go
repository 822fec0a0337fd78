// Copyright 2026 The Lampyr Authors
// SPDX-License-Identifier: Apache-2.0

// Command cainjector is a minimal cert-manager CA injector composed from the
// cert-manager v1.14.4 library packages and controller-runtime.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/tools/clientcmd"
	logsapi "k8s.io/component-base/logs/api/v1"
	apiregv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/cert-manager/cert-manager/cmd/lampyr/internal/cli"
	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"github.com/cert-manager/cert-manager/pkg/controller/cainjector"
	logf "github.com/cert-manager/cert-manager/pkg/logs"
	"github.com/cert-manager/cert-manager/pkg/util"
)

func main() {
	var (
		apiServerHost, kubeconfig, namespace string
		leaderElect                          bool
		leNamespace                          string
		leaseDuration, renewDeadline, retry  time.Duration
		metricsAddr                          string
		enableCertSource                     bool
		enable                               = map[string]*bool{}
	)
	logging := logsapi.NewLoggingConfiguration()
	fs := cli.FlagSet()
	fs.StringVar(&apiServerHost, "master", "", "Kubernetes API server address (overrides kubeconfig)")
	fs.StringVar(&kubeconfig, "kubeconfig", "", "Path to a kubeconfig; in-cluster config if empty")
	fs.StringVar(&namespace, "namespace", "", "Only inject from/into this namespace (all if empty)")
	fs.BoolVar(&leaderElect, "leader-elect", true, "Use leader election")
	fs.StringVar(&leNamespace, "leader-election-namespace", "kube-system", "Namespace of the leader election Lease")
	fs.DurationVar(&leaseDuration, "leader-election-lease-duration", 60*time.Second, "Lease duration")
	fs.DurationVar(&renewDeadline, "leader-election-renew-deadline", 40*time.Second, "Renew deadline")
	fs.DurationVar(&retry, "leader-election-retry-period", 15*time.Second, "Retry period")
	fs.StringVar(&metricsAddr, "metrics-listen-address", "0", "Metrics listen address (0 disables)")
	fs.BoolVar(&enableCertSource, "enable-certificates-data-source", true, "Allow cert-manager.io/inject-ca-from (Certificate source)")
	for flagName, kind := range map[string]string{
		"enable-mutatingwebhookconfigurations-injectable":   cainjector.MutatingWebhookConfigurationName,
		"enable-validatingwebhookconfigurations-injectable": cainjector.ValidatingWebhookConfigurationName,
		"enable-apiservices-injectable":                     cainjector.APIServiceName,
		"enable-customresourcedefinitions-injectable":       cainjector.CustomResourceDefinitionName,
	} {
		enable[kind] = fs.Bool(flagName, true, "Inject CA data into "+kind+" resources")
	}
	cli.Start(fs, logging)
	log := logf.Log.WithName("lampyr-cainjector")
	ctrl.SetLogger(log)

	scheme := runtime.NewScheme()
	utilruntime.Must(corev1.AddToScheme(scheme))
	utilruntime.Must(admissionv1.AddToScheme(scheme))
	utilruntime.Must(apiextv1.AddToScheme(scheme))
	utilruntime.Must(apiregv1.AddToScheme(scheme))
	utilruntime.Must(cmapi.AddToScheme(scheme))

	restCfg, err := clientcmd.BuildConfigFromFlags(apiServerHost, kubeconfig)
	if err != nil {
		cli.Fatal(err)
	}
	restCfg = util.RestConfigWithUserAgent(restCfg, "cainjector")

	cacheOpts := cache.Options{}
	if namespace != "" {
		cacheOpts.DefaultNamespaces = map[string]cache.Config{namespace: {}}
	}
	mgr, err := ctrl.NewManager(restCfg, ctrl.Options{
		Scheme:                        scheme,
		Cache:                         cacheOpts,
		Metrics:                       metricsserver.Options{BindAddress: metricsAddr},
		LeaderElection:                leaderElect,
		LeaderElectionNamespace:       leNamespace,
		LeaderElectionID:              "cert-manager-cainjector-leader-election",
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 &leaseDuration,
		RenewDeadline:                 &renewDeadline,
		RetryPeriod:                   &retry,
	})
	if err != nil {
		cli.Fatal(fmt.Errorf("creating manager: %w", err))
	}

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()

	enabled := map[string]bool{}
	for k, v := range enable {
		enabled[k] = *v
	}
	if err := cainjector.RegisterAllInjectors(ctx, mgr, cainjector.SetupOptions{
		Namespace:                    namespace,
		EnableCertificatesDataSource: enableCertSource,
		EnabledReconcilersFor:        enabled,
	}); err != nil {
		cli.Fatal(err)
	}
	if err := mgr.Start(ctx); err != nil {
		cli.Fatal(err)
	}
	logf.FlushLogs()
}
