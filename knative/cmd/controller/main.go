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
// this process never links. Upstream's cert-manager Certificate reconciler
// (net-certmanager) is added, as upstream adds it, when config-network asks for
// cert-manager-issued certificates at start-up (external-domain-tls and the
// like: restart the controller after changing them) and cert-manager's CRDs
// are served; asked for without cert-manager, the rest runs and the reason is
// logged.
//
// The component name differs from upstream's "controller" so leader-election
// leases, logging keys and metrics never collide with a stock controller.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	netcfg "knative.dev/networking/pkg/config"
	"knative.dev/pkg/injection"
	"knative.dev/pkg/injection/sharedmain"
	"knative.dev/pkg/reconciler"
	"knative.dev/pkg/signals"

	"knative.dev/pkg/system"
	"knative.dev/serving/pkg/networking"
	"knative.dev/serving/pkg/reconciler/certificate"
	"knative.dev/serving/pkg/reconciler/configuration"
	"knative.dev/serving/pkg/reconciler/domainmapping"
	"knative.dev/serving/pkg/reconciler/gc"
	"knative.dev/serving/pkg/reconciler/labeler"
	"knative.dev/serving/pkg/reconciler/nscert"
	"knative.dev/serving/pkg/reconciler/route"
	"knative.dev/serving/pkg/reconciler/service"

	certmanagerclient "knative.dev/serving/pkg/client/certmanager/clientset/versioned"
	"knative.dev/serving/pkg/client/certmanager/injection/informers/acme/v1/challenge"
	cmcertificate "knative.dev/serving/pkg/client/certmanager/injection/informers/certmanager/v1/certificate"
	"knative.dev/serving/pkg/client/certmanager/injection/informers/certmanager/v1/certificaterequest"
	"knative.dev/serving/pkg/client/certmanager/injection/informers/certmanager/v1/clusterissuer"
	"knative.dev/serving/pkg/client/certmanager/injection/informers/certmanager/v1/issuer"
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
	if err := certManagerWanted(ctx, cfg); err != nil {
		log.Printf("not running the cert-manager Certificate reconciler: %v", err)
	} else {
		for _, informer := range []injection.InformerInjector{challenge.WithInformer, cmcertificate.WithInformer,
			certificaterequest.WithInformer, clusterissuer.WithInformer, issuer.WithInformer} {
			injection.Default.RegisterInformer(informer)
		}
		ctors = append(ctors, certificate.NewController)
	}
	sharedmain.MainWithConfig(ctx, component, cfg, ctors...)
}

// certManagerWanted is nil when config-network asks for cert-manager-issued
// certificates and the API server serves the cert-manager resources the
// reconciler watches; otherwise it says why the reconciler does not run.
func certManagerWanted(ctx context.Context, cfg *rest.Config) error {
	client := kubernetes.NewForConfigOrDie(cfg)
	cm, err := client.CoreV1().ConfigMaps(system.Namespace()).Get(ctx, netcfg.ConfigMapName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading %s/%s: %w", system.Namespace(), netcfg.ConfigMapName, err)
	}
	network, err := netcfg.NewConfigFromMap(cm.Data)
	if err != nil {
		return fmt.Errorf("%s/%s is invalid: %w", system.Namespace(), netcfg.ConfigMapName, err)
	}
	if !networking.IsNetCertManagerControllerRequired(network) {
		return fmt.Errorf("%s does not ask for cert-manager certificates", netcfg.ConfigMapName)
	}
	discovery := certmanagerclient.NewForConfigOrDie(cfg).Discovery()
	for groupVersion, resources := range map[string][]string{
		"cert-manager.io/v1":      {"certificates", "certificaterequests", "clusterissuers", "issuers"},
		"acme.cert-manager.io/v1": {"challenges"},
	} {
		served, err := discovery.ServerResourcesForGroupVersion(groupVersion)
		if err != nil {
			return fmt.Errorf("%s asks for cert-manager certificates, but %s is not served (install cert-manager): %w",
				netcfg.ConfigMapName, groupVersion, err)
		}
		for _, want := range resources {
			if !servesResource(served.APIResources, want) {
				return fmt.Errorf("%s asks for cert-manager certificates, but %s/%s is not served (install cert-manager)",
					netcfg.ConfigMapName, groupVersion, want)
			}
		}
	}
	return nil
}

// servesResource reports whether name is among resources.
func servesResource(resources []metav1.APIResource, name string) bool {
	for _, r := range resources {
		if r.Name == name {
			return true
		}
	}
	return false
}
