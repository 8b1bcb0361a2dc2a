"""The build stage (workflow/rules/build.smk): every instance of our kernels compiled offline, with
no GPU, and censused from its PTX, SASS and ptxas report, so the census describes the code that
runs."""
