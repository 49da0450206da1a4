"""What the Kubernetes backend adds to the manifests the core Renderer renders: the
rendezvous contract, by which a trial's pods find each other under the names its objects give them."""
