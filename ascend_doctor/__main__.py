from ascend_doctor.cli.main import main

main()
