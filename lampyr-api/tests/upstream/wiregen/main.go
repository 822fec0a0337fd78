// Command wiregen prints JSON written by the upstream Go types lampyr-api
// models, one JSON object per line: {"type", "case", "value"}.
//
//   - case "zero": the zero value of each spec and status type, as Go's
//     encoding/json writes it (what omitempty leaves out, what it keeps);
//   - case "fuzz N": a whole object of each kind with every field filled by
//     gofuzz (fixed seed, no nil pointers, no empty lists), metadata fixed
//     and the pod spec fixed (the pod spec's fidelity is checked with
//     upstream's example YAML instead).
//
// lampyr-api's upstream_compat test builds it in a copy of knative/go.mod
// (the pinned versions) and reads every line back through the Rust types.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"strings"

	fuzz "github.com/google/gofuzz"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	netv1alpha1 "knative.dev/networking/pkg/apis/networking/v1alpha1"
	"knative.dev/pkg/apis"
	duckv1 "knative.dev/pkg/apis/duck/v1"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
	servingv1beta1 "knative.dev/serving/pkg/apis/serving/v1beta1"
)

// objectsPerKind is how many fuzzed objects of each kind are printed.
const objectsPerKind = 20

type line struct {
	Type  string `json:"type"`
	Case  string `json:"case"`
	Value any    `json:"value"`
}

type object interface {
	runtime.Object
	metav1.Object
}

type kind struct {
	gvk schema.GroupVersionKind
	new func() object
}

func main() {
	enc := json.NewEncoder(os.Stdout)
	emit := func(typ, c string, v any) {
		if err := enc.Encode(line{Type: typ, Case: c, Value: v}); err != nil {
			fmt.Fprintf(os.Stderr, "wiregen: %s %s: %v\n", typ, c, err)
			os.Exit(1)
		}
	}

	for _, zero := range []any{
		servingv1.ServiceStatus{},
		servingv1.ConfigurationStatus{},
		servingv1.RevisionStatus{},
		servingv1.RouteStatus{},
		servingv1.RouteSpec{},
		servingv1.TrafficTarget{},
		servingv1.ContainerStatus{},
		servingv1beta1.DomainMappingSpec{},
		servingv1beta1.DomainMappingStatus{},
		servingv1beta1.SecretTLS{},
		duckv1.Addressable{},
		duckv1.KReference{},
		netv1alpha1.IngressSpec{},
		netv1alpha1.IngressTLS{},
		netv1alpha1.IngressRule{},
		netv1alpha1.HTTPIngressRuleValue{},
		netv1alpha1.HTTPIngressPath{},
		netv1alpha1.IngressBackendSplit{},
		netv1alpha1.HeaderMatch{},
		netv1alpha1.IngressStatus{},
		netv1alpha1.LoadBalancerStatus{},
		netv1alpha1.LoadBalancerIngressStatus{},
		netv1alpha1.CertificateSpec{},
		netv1alpha1.CertificateStatus{},
		netv1alpha1.HTTP01Challenge{},
		netv1alpha1.ClusterDomainClaimSpec{},
	} {
		emit(reflect.TypeOf(zero).Name(), "zero", zero)
	}

	kinds := []kind{
		{servingv1.SchemeGroupVersion.WithKind("Service"), func() object { return &servingv1.Service{} }},
		{servingv1.SchemeGroupVersion.WithKind("Configuration"), func() object { return &servingv1.Configuration{} }},
		{servingv1.SchemeGroupVersion.WithKind("Revision"), func() object { return &servingv1.Revision{} }},
		{servingv1.SchemeGroupVersion.WithKind("Route"), func() object { return &servingv1.Route{} }},
		{servingv1beta1.SchemeGroupVersion.WithKind("DomainMapping"), func() object { return &servingv1beta1.DomainMapping{} }},
		{netv1alpha1.SchemeGroupVersion.WithKind("Ingress"), func() object { return &netv1alpha1.Ingress{} }},
		{netv1alpha1.SchemeGroupVersion.WithKind("Certificate"), func() object { return &netv1alpha1.Certificate{} }},
		{netv1alpha1.SchemeGroupVersion.WithKind("ClusterDomainClaim"), func() object { return &netv1alpha1.ClusterDomainClaim{} }},
	}
	f := fuzz.NewWithSeed(20240716).NilChance(0).NumElements(1, 3).Funcs(
		// Fixed metadata: it is Kubernetes', not Knative's.
		func(m *metav1.ObjectMeta, c fuzz.Continue) {
			*m = metav1.ObjectMeta{Name: "wiregen", Namespace: "default", Generation: 1}
		},
		// A fixed pod spec.
		func(p *corev1.PodSpec, c fuzz.Continue) {
			*p = corev1.PodSpec{Containers: []corev1.Container{{
				Name:  "user-container",
				Image: "registry.local/app@sha256:00",
				Ports: []corev1.ContainerPort{{Name: "h2c", ContainerPort: 8080}},
			}}}
		},
		// Condition statuses and severities from their closed sets.
		func(cond *apis.Condition, c fuzz.Continue) {
			c.FuzzNoCustom(cond)
			cond.Status = []corev1.ConditionStatus{corev1.ConditionTrue, corev1.ConditionFalse, corev1.ConditionUnknown}[c.Intn(3)]
			cond.Severity = []apis.ConditionSeverity{apis.ConditionSeverityError, apis.ConditionSeverityWarning, apis.ConditionSeverityInfo}[c.Intn(3)]
		},
		// URLs that parse.
		func(u *apis.URL, c fuzz.Continue) {
			*u = apis.URL{Scheme: "https", Host: lower(c) + ".example.com", Path: "/" + lower(c)}
		},
		// Enumerations from their closed sets (empty included: omitempty).
		func(v *netv1alpha1.IngressVisibility, c fuzz.Continue) {
			*v = []netv1alpha1.IngressVisibility{"", netv1alpha1.IngressVisibilityExternalIP, netv1alpha1.IngressVisibilityClusterLocal}[c.Intn(3)]
		},
		func(v *netv1alpha1.HTTPOption, c fuzz.Continue) {
			*v = []netv1alpha1.HTTPOption{"", netv1alpha1.HTTPOptionEnabled, netv1alpha1.HTTPOptionRedirected}[c.Intn(3)]
		},
	)
	for i := 0; i < objectsPerKind; i++ {
		for _, k := range kinds {
			o := k.new()
			f.Fuzz(o)
			o.GetObjectKind().SetGroupVersionKind(k.gvk)
			emit(k.gvk.Kind, fmt.Sprintf("fuzz %d", i), o)
		}
	}
}

// lower is a short random lowercase word.
func lower(c fuzz.Continue) string {
	var b strings.Builder
	for n := 1 + c.Intn(8); n > 0; n-- {
		b.WriteByte(byte('a' + c.Intn(26)))
	}
	return b.String()
}
