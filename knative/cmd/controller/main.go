// Copyright 2026 The Lampyr Authors
// SPDX-License-Identifier: Apache-2.0

// Command controller is Lampyr's Knative Serving controller: the upstream
// knative.dev/serving reconcilers, unmodified, minus the Pod-based ones.
//
// Decision record "Use Knative APIs with Fiber-backed Revision
// reconciliation": Lampyr composes the upstream Service, Configuration,
// Labeler, Route, garbage-collection, namespace-certificate and DomainMapping
// reconcilers without changing their source, and replaces the Revision
// reconciler with its own Fiber Revision reconciler. Upstream's
// cmd/controller has no switch to drop single reconcilers, so this main
// passes the kept constructors to sharedmain itself. Deliberately absent:
// revision and serverlessservice (Pods, Deployments, the activator path),
// and the autoscaler and activator, which are separate upstream binaries
// this process never links. Also absent is upstream's optional cert-manager
// Certificate reconciler (net-certmanager), enabled upstream only when
// config-network asks for cert-manager-issued certificates.
//
// The component name differs from upstream's "controller" so leader-election
// leases, logging keys and metrics never collide with a stock controller.
package main

import (
	"flag"

	"knative.dev/pkg/injection"
	"knative.dev/pkg/injection/sharedmain"
	"knative.dev/pkg/reconciler"
	"knative.dev/pkg/signals"

	"knative.dev/serving/pkg/reconciler/configuration"
	"knative.dev/serving/pkg/reconciler/domainmapping"
	"knative.dev/serving/pkg/reconciler/gc"
	"knative.dev/serving/pkg/reconciler/labeler"
	"knative.dev/serving/pkg/reconciler/nscert"
	"knative.dev/serving/pkg/reconciler/route"
	"knative.dev/serving/pkg/reconciler/service"
)

// component names this controller in leases, logs and metrics.
const component = "lampyr-knative-controller"

// Client rate limits used unless --kube-api-qps / --kube-api-burst (or
// KUBE_API_QPS / KUBE_API_BURST) set others. sharedmain's default, five
// requests a second per reconciler, throttled a burst of 200 Services to
// about 35 writes a second (measured: 67 s to Ready, 46 s with these); this
// process does all of Serving's object writes for every Revision, and API
// Priority and Fairness still shields the API server.
const (
	defaultQPS   = 150
	defaultBurst = 300
)

// ctors are exactly the upstream reconcilers Lampyr keeps.
var ctors = []injection.ControllerConstructor{
	configuration.NewController,
	labeler.NewController,
	route.NewController,
	service.NewController,
	gc.NewController,
	nscert.NewController,
	domainmapping.NewController,
}

func main() {
	// The one flag upstream's controller adds to sharedmain's.
	flag.DurationVar(&reconciler.DefaultTimeout,
		"reconciliation-timeout", reconciler.DefaultTimeout,
		"The amount of time to give each reconciliation of a resource to complete before its context is canceled.")

	// Off only where several controllers share one host's network (the
	// test environment): upstream's probes always bind :8080.
	probes := flag.Bool("health-probes", true,
		"Serve the readiness and liveness probes on :8080 (upstream's fixed port).")

	ctx := signals.NewContext()
	// Parses the flags (--kubeconfig, --server, the one above).
	cfg := injection.ParseAndGetRESTConfigOrDie()
	if cfg.QPS == 0 {
		cfg.QPS = defaultQPS
	}
	if cfg.Burst == 0 {
		cfg.Burst = defaultBurst
	}
	if !*probes {
		ctx = sharedmain.WithHealthProbesDisabled(ctx)
	}
	sharedmain.MainWithConfig(ctx, component, cfg, ctors...)
}
