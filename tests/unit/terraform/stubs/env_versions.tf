# Stand-in for terraform/envs/{staging,prod}/versions.tf (offline tests only): no OCI
# provider (the env's providers.tf is dropped too). The backend is the real envs' kind; the
# test points its path at a temporary directory with `init -backend-config=path=...`.
terraform {
  required_version = ">= 1.6"

  backend "local" {}
}
