from ascend_doctor.agent.cli import main

main()
