// Copyright 2026 The Lampyr Authors
// SPDX-License-Identifier: Apache-2.0

// Command controller is cert-manager's controller composed from the
// cert-manager v1.14.4 library packages. It runs only the controllers needed
// for SelfSigned and CA Issuers/ClusterIssuers, Certificates and
// CertificateRequests (no ACME, Vault, Venafi, ingress/gateway shims).
package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/utils/clock"

	// Registers the cert-manager controller feature gates (e.g.
	// SecretsFilteredCaching) consulted by controller.NewContextFactory.
	_ "github.com/cert-manager/cert-manager/internal/controller/feature"

	"github.com/cert-manager/cert-manager/cmd/lampyr/internal/cli"
	controllerpkg "github.com/cert-manager/cert-manager/pkg/controller"
	logf "github.com/cert-manager/cert-manager/pkg/logs"
	"github.com/cert-manager/cert-manager/pkg/metrics"
	utilfeature "github.com/cert-manager/cert-manager/pkg/util/feature"

	// Controllers: each package registers itself with controllerpkg.Register.
	"github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/approver"
	crca "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/ca"
	crselfsigned "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/selfsigned"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/issuing"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/keymanager"
	certmetrics "github.com/cert-manager/cert-manager/pkg/controller/certificates/metrics"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/readiness"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/requestmanager"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/revisionmanager"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/trigger"
	"github.com/cert-manager/cert-manager/pkg/controller/clusterissuers"
	"github.com/cert-manager/cert-manager/pkg/controller/issuers"

	// Issuer implementations used by the (cluster)issuers controllers to
	// validate and set the Ready condition on Issuer resources.
	_ "github.com/cert-manager/cert-manager/pkg/issuer/ca"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/selfsigned"
)

var defaultControllers = []string{
	issuers.ControllerName,
	clusterissuers.ControllerName,
	trigger.ControllerName,
	issuing.ControllerName,
	keymanager.ControllerName,
	requestmanager.ControllerName,
	readiness.ControllerName,
	revisionmanager.ControllerName,
	certmetrics.ControllerName,
	approver.ControllerName,
	crselfsigned.CRControllerName,
	crca.CRControllerName,
}

type options struct {
	apiServerHost            string
	kubeconfig               string
	namespace                string
	clusterResourceNamespace string
	qps                      float32
	burst                    int
	workers                  int
	controllers              []string
	enableOwnerRef           bool
	copiedAnnotationPrefixes []string
	metricsAddr              string
	healthzAddr              string
	featureGates             map[string]bool

	leaderElect          bool
	leaderElectNamespace string
	leaseDuration        time.Duration
	renewDeadline        time.Duration
	retryPeriod          time.Duration

	logging *logsapi.LoggingConfiguration
}

func main() {
	o := &options{logging: logsapi.NewLoggingConfiguration()}
	fs := cli.FlagSet()
	fs.StringVar(&o.apiServerHost, "master", "", "Kubernetes API server address (overrides kubeconfig)")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "Path to a kubeconfig; in-cluster config if empty")
	fs.StringVar(&o.namespace, "namespace", "", "Only watch resources in this namespace (all if empty)")
	fs.StringVar(&o.clusterResourceNamespace, "cluster-resource-namespace", "kube-system", "Namespace holding Secrets referenced by ClusterIssuers")
	fs.Float32Var(&o.qps, "kube-api-qps", 20, "Kubernetes API client QPS")
	fs.IntVar(&o.burst, "kube-api-burst", 50, "Kubernetes API client burst")
	fs.IntVar(&o.workers, "concurrent-workers", 5, "Workers per controller")
	fs.StringSliceVar(&o.controllers, "controllers", defaultControllers, "Controllers to run")
	fs.BoolVar(&o.enableOwnerRef, "enable-certificate-owner-ref", false, "Set Certificate as owner of its Secret")
	fs.StringSliceVar(&o.copiedAnnotationPrefixes, "copied-annotation-prefixes", []string{"*", "-kubectl.kubernetes.io/", "-fluxcd.io/", "-argocd.argoproj.io/"}, "Annotation prefixes copied Certificate -> CertificateRequest")
	fs.StringVar(&o.metricsAddr, "metrics-listen-address", "0.0.0.0:9402", "Prometheus metrics listen address (empty disables)")
	fs.StringVar(&o.healthzAddr, "healthz-listen-address", "0.0.0.0:9403", "Liveness (/livez) listen address (empty disables)")
	fs.Var(newMapStringBool(&o.featureGates), "feature-gates", "Feature gates, e.g. Foo=true,Bar=false")
	fs.BoolVar(&o.leaderElect, "leader-elect", true, "Use leader election")
	fs.StringVar(&o.leaderElectNamespace, "leader-election-namespace", "kube-system", "Namespace of the leader election Lease")
	fs.DurationVar(&o.leaseDuration, "leader-election-lease-duration", 60*time.Second, "Lease duration")
	fs.DurationVar(&o.renewDeadline, "leader-election-renew-deadline", 40*time.Second, "Renew deadline")
	fs.DurationVar(&o.retryPeriod, "leader-election-retry-period", 15*time.Second, "Retry period")
	// Accepted for compatibility with upstream manifests; unused here.
	var ignoredStr string
	var ignoredInt int
	fs.StringVar(&ignoredStr, "acme-http01-solver-image", "", "Ignored (ACME not supported)")
	fs.IntVar(&ignoredInt, "max-concurrent-challenges", 60, "Ignored (ACME not supported)")
	cli.Start(fs, o.logging)
	if err := utilfeature.DefaultMutableFeatureGate.SetFromMap(o.featureGates); err != nil {
		cli.Fatal(err)
	}
	if err := run(o); err != nil {
		cli.Fatal(fmt.Errorf("controller exited: %w", err))
	}
	logf.FlushLogs()
}

func run(o *options) error {
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	log := logf.Log.WithName("lampyr-controller")
	ctx = logf.NewContext(ctx, log)

	for _, name := range o.controllers {
		if _, ok := controllerpkg.Known()[name]; !ok {
			return fmt.Errorf("unknown controller %q", name)
		}
	}

	m := metrics.New(log, clock.RealClock{})
	var servers []*http.Server
	if o.metricsAddr != "" {
		ln, err := net.Listen("tcp", o.metricsAddr)
		if err != nil {
			return fmt.Errorf("metrics listener: %w", err)
		}
		srv := m.NewServer(ln)
		servers = append(servers, srv)
		go func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error(err, "metrics server failed")
			}
		}()
	}
	if o.healthzAddr != "" {
		mux := http.NewServeMux()
		ok := func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write([]byte("ok"))
		}
		mux.HandleFunc("/livez", ok)
		mux.HandleFunc("/healthz", ok)
		srv := &http.Server{Addr: o.healthzAddr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		servers = append(servers, srv)
		go func() {
			if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error(err, "healthz server failed")
			}
		}()
	}
	defer func() {
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer scancel()
		for _, s := range servers {
			_ = s.Shutdown(sctx)
		}
	}()

	opts := controllerpkg.ContextOptions{
		APIServerHost:      o.apiServerHost,
		Kubeconfig:         o.kubeconfig,
		KubernetesAPIQPS:   o.qps,
		KubernetesAPIBurst: o.burst,
		Namespace:          o.namespace,
		Clock:              clock.RealClock{},
		Metrics:            m,
		IssuerOptions: controllerpkg.IssuerOptions{
			ClusterResourceNamespace: o.clusterResourceNamespace,
		},
		CertificateOptions: controllerpkg.CertificateOptions{
			EnableOwnerRef:           o.enableOwnerRef,
			CopiedAnnotationPrefixes: o.copiedAnnotationPrefixes,
		},
	}

	startControllers := func(ctx context.Context) error {
		factory, err := controllerpkg.NewContextFactory(ctx, opts)
		if err != nil {
			return err
		}
		var wg sync.WaitGroup
		errCh := make(chan error, len(o.controllers))
		for _, name := range o.controllers {
			c, err := controllerpkg.Known()[name](factory)
			if err != nil {
				return fmt.Errorf("constructing controller %q: %w", name, err)
			}
			wg.Add(1)
			go func(name string, c controllerpkg.Interface) {
				defer wg.Done()
				log.Info("starting controller", "controller", name)
				if err := c.Run(o.workers, ctx.Done()); err != nil {
					errCh <- fmt.Errorf("controller %q: %w", name, err)
				}
			}(name, c)
		}
		// Informers are registered lazily by the controllers above; start the
		// shared factories only once every controller has been constructed.
		cc, err := factory.Build()
		if err != nil {
			return err
		}
		cc.KubeSharedInformerFactory.Start(ctx.Done())
		cc.SharedInformerFactory.Start(ctx.Done())
		cc.HTTP01ResourceMetadataInformersFactory.Start(ctx.Done())
		if cc.GatewaySolverEnabled {
			cc.GWShared.Start(ctx.Done())
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case err := <-errCh:
			return err
		case <-done:
			return nil
		}
	}

	if !o.leaderElect {
		return startControllers(ctx)
	}
	return runWithLeaderElection(ctx, o, startControllers)
}

func runWithLeaderElection(ctx context.Context, o *options, fn func(context.Context) error) error {
	cfg, err := clientcmd.BuildConfigFromFlags(o.apiServerHost, o.kubeconfig)
	if err != nil {
		return err
	}
	cl, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	id, err := os.Hostname()
	if err != nil {
		return err
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: o.leaderElectNamespace, Name: "cert-manager-controller"},
		Client:     cl.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: id + "-external-cert-manager-controller"},
	}
	var runErr error
	leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   o.leaseDuration,
		RenewDeadline:   o.renewDeadline,
		RetryPeriod:     o.retryPeriod,
		ReleaseOnCancel: true,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(lctx context.Context) { runErr = fn(lctx) },
			OnStoppedLeading: func() {
				if ctx.Err() == nil && runErr == nil {
					runErr = errors.New("leader election lost")
				}
			},
		},
	})
	return runErr
}

// mapStringBool is a tiny pflag.Value for "k=v,k2=v2" boolean maps.
type mapStringBool struct{ m *map[string]bool }

func newMapStringBool(m *map[string]bool) *mapStringBool {
	*m = map[string]bool{}
	return &mapStringBool{m: m}
}

func (v *mapStringBool) String() string {
	var parts []string
	for k, b := range *v.m {
		parts = append(parts, fmt.Sprintf("%s=%t", k, b))
	}
	return strings.Join(parts, ",")
}

func (v *mapStringBool) Set(s string) error {
	for _, kv := range strings.Split(s, ",") {
		if kv = strings.TrimSpace(kv); kv == "" {
			continue
		}
		k, val, ok := strings.Cut(kv, "=")
		if !ok {
			return fmt.Errorf("invalid feature gate %q", kv)
		}
		switch strings.ToLower(strings.TrimSpace(val)) {
		case "true":
			(*v.m)[strings.TrimSpace(k)] = true
		case "false":
			(*v.m)[strings.TrimSpace(k)] = false
		default:
			return fmt.Errorf("invalid value in %q", kv)
		}
	}
	return nil
}

func (v *mapStringBool) Type() string { return "mapStringBool" }
