# Stand-in for terraform/modules/baremetal_gpu_cloud/versions.tf (offline tests only):
# no provider at all.
terraform {
  required_version = ">= 1.6"
}
