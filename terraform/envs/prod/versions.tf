terraform {
  required_version = ">= 1.6"

  required_providers {
    # Same pin as modules/baremetal_gpu_cloud. The first online `terraform init` writes
    # .terraform.lock.hcl here, which pins the exact build: commit it.
    oci = {
      source  = "oracle/oci"
      version = "~> 6.0"
    }
  }

  # State lives in <repo>/artifacts/prod/ (git-ignored), relative to the working
  # directory: run `terraform -chdir=terraform/envs/prod ...`. A team sharing prod
  # should move it to a remote backend (e.g. OCI Object Storage through its S3-compatible
  # API and backend "s3"), with `terraform init -migrate-state`.
  backend "local" {
    path = "../../../artifacts/prod/terraform.tfstate"
  }
}
