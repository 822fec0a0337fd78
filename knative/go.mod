module lampyr.dev/knative

go 1.26.0

require (
	knative.dev/networking v0.0.0-20240716111826-bab7f2a3e556
	knative.dev/pkg v0.0.0-20240716082220-4355f0c73608
	knative.dev/serving v0.42.2
)

// The upstream webhook, built as-is for the cluster test environment:
//   go build -o BIN knative.dev/serving/cmd/webhook
tool knative.dev/serving/cmd/webhook
